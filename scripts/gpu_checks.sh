#!/usr/bin/env bash
# The GPU issue's checks in one unattended run, each stage under its own time limit, every log and report
# kept under $OUT (default gpu-out/), packed as $OUT/gpu-checks.tar.gz at the end.
#
#   scripts/gpu_checks.sh smoke   the demo-model tests on CUDA, tokens and batch benchmarks on demo models
#   scripts/gpu_checks.sh full    tokens (large-v3 size: float16, bfloat16, float32) and batch (1, 4, 8)
#   scripts/gpu_checks.sh all     both in one call (on an H200 on 2026-11-26: smoke ~2 min, full ~6 min)
#
# A GPU host without the project's requirements installed (no registry) takes wheels from .whl/ when there
# (scripts/gpu_wheels.sh fetches them). Figures and how to read them: docs/benchmarks.md, "On a GPU".
# On CUDA the first round of a benchmark pays first-use costs (new shapes, the allocator growing: 4.8 s
# against 1.2 s for generate() on an H200): runs here take 3 rounds, and the median drops that one.
set -u
cd "$(dirname "$0")/.."
MODE=${1:-smoke}
case "$MODE" in
    smoke | full | all) ;;
    *) echo "usage: scripts/gpu_checks.sh [smoke|full|all]" >&2 && exit 2 ;;
esac
OUT=${OUT:-gpu-out}
DEVICE=${DEVICE:-cuda}  # DEVICE=cpu tries the script itself on a machine without a GPU
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
    rm -rf /tmp/site  # a warm machine keeps the last run's
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    export PYTHONPATH="/tmp/site:$PWD"
fi

stage() {  # stage NAME SECONDS COMMAND...: run under a limit, log to $OUT/NAME.log, print its tail
    local name=$1 limit=$2 start rc
    shift 2
    start=$(date +%s)
    timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
    rc=$?
    echo "== $name: exit $rc after $(($(date +%s) - start)) s (limit $limit)"
    tail -n "${TAIL:-12}" "$OUT/$name.log"
}

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"

bench() {  # bench NAME SECONDS BENCHMARK OPTIONS...
    local name=$1 limit=$2
    shift 2
    stage "$name" "$limit" python3 -m benchmarks "$@" --device "$DEVICE" --out "$OUT/$name"
}

if [ "$MODE" = smoke ] || [ "$MODE" = all ]; then
    TAIL=25 stage tests-cuda "${TEST_SECONDS:-150}" env SPECDEC_TEST_DEVICE="$DEVICE" python3 -m pytest -q -p no:cacheprovider -p no:benchmark \
        -n 8 tests/test_lossless.py tests/test_batching.py tests/test_longform.py tests/test_target_step.py
    bench tokens-small-f16 90 tokens --size small --quick --dtype float16
    bench batch-small-f16 60 batch --size small --quick --batch-sizes 1 4 8 --dtype float16
fi
if [ "$MODE" = full ] || [ "$MODE" = all ]; then
    stage build-large 120 python3 -c "from benchmarks.checkpoints import bench_models; print(bench_models('large-v3'))"
    bench tokens-large-f16 "${F16_SECONDS:-200}" tokens --size large-v3 --quick --dtype float16 --audio assets/en-weather.wav \
        --max-new-tokens 64 --alphas 0.6 0.8 0.95 --repeats 3
    bench batch-large-f16 "${BATCH_SECONDS:-100}" batch --size large-v3 --batch-sizes 1 4 8 --repeats 3 --dtype float16
    for dtype in bfloat16 float32; do
        bench "tokens-large-$dtype" "${OTHER_SECONDS:-80}" tokens --size large-v3 --quick --alphas 0.8 \
            --max-new-tokens 64 --repeats 3 --dtype "$dtype"
    done
fi
tar -czf "$OUT/gpu-checks.tar.gz" -C "$OUT" --exclude gpu-checks.tar.gz . 2>/dev/null
echo "packed $(du -h "$OUT/gpu-checks.tar.gz" | cut -f1)"
