#!/usr/bin/env bash
# The GPU checks in one unattended run: each stage under its own time limit, and all of them within
# DEADLINE seconds of the start (a stage gets what is left, at most its own limit), every log and report
# kept under $OUT (default gpu-out/) and packed as $OUT/gpu-checks.tar.gz at the end. Exit status: 1 if
# any stage failed or ran out of time.
#
#   scripts/gpu_checks.sh smoke   the demo-model tests on CUDA, tokens and batch benchmarks on demo models
#   scripts/gpu_checks.sh full    tokens (large-v3 size: float16, then float32 and bfloat16), batch 1, 4, 8,
#                                 and scripts/gpu_graph_probe.py (a decoder step eager against a CUDA graph)
#   scripts/gpu_checks.sh all     both in one call, the large float16 tokens and the tests first
#
# A GPU host without the project's requirements installed (no registry) takes wheels from .whl/ when there
# (scripts/gpu_wheels.sh fetches them). On CUDA the benchmarks run each configuration once untimed at full
# length (new shapes have first-use costs there), then 3 timed rounds for medians. How to read the figures:
# docs/benchmarks.md, "On a GPU".
set -u
cd "$(dirname "$0")/.."
MODE=${1:-smoke}
case "$MODE" in
    smoke | full | all) ;;
    *) echo "usage: scripts/gpu_checks.sh [smoke|full|all]" >&2 && exit 2 ;;
esac
OUT=${OUT:-gpu-out}
DEVICE=${DEVICE:-cuda}  # DEVICE=cpu tries the script itself on a machine without a GPU
DEADLINE=$(($(date +%s) + ${DEADLINE:-570}))
STATUS=0
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
    rm -rf /tmp/site  # a warm machine keeps the last run's
    if ! python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
        .whl/*.whl; then
        echo "could not install the wheels in .whl/" >&2
        exit 1
    fi
    export PYTHONPATH="/tmp/site:$PWD"
fi

stage() {  # stage NAME SECONDS COMMAND...: run under min(SECONDS, time left), log to $OUT/NAME.log
    local name=$1 limit=$2 left start rc
    shift 2
    left=$((DEADLINE - $(date +%s)))
    if [ "$left" -lt 20 ]; then
        echo "== $name: skipped, no time left"
        STATUS=1
        return
    fi
    [ "$left" -lt "$limit" ] && limit=$left
    start=$(date +%s)
    timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
    rc=$?
    [ "$rc" -ne 0 ] && STATUS=1
    echo "== $name: exit $rc after $(($(date +%s) - start)) s (limit $limit)"
    tail -n "${TAIL:-12}" "$OUT/$name.log"
    echo
}

bench() {  # bench NAME SECONDS BENCHMARK OPTIONS...
    local name=$1 limit=$2
    shift 2
    stage "$name" "$limit" python3 -m benchmarks "$@" --device "$DEVICE" --out "$OUT/$name"
}

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
python3 -c "import torch, transformers as t; print('torch', torch.__version__, 'transformers', t.__version__)"

# each stage a function; a mode runs its stages in order of importance, each within what is left of DEADLINE
build_large() {
    stage build-large 120 python3 -c "import benchmarks.checkpoints as c; c.bench_models('large-v3')"
}
tokens_large_float16() {
    bench tokens-large-float16 200 tokens --size large-v3 --quick --dtype float16 \
        --audio assets/en-weather.wav --max-new-tokens 64 --alphas 0.6 0.8 0.95 --repeats 3
}
batch_large_float16() {
    bench batch-large-float16 100 batch --size large-v3 --batch-sizes 1 4 8 --repeats 3 --dtype float16
}
tokens_large_other() {
    for dtype in float32 bfloat16; do
        bench "tokens-large-$dtype" 120 tokens --size large-v3 --quick --alphas 0.8 --max-new-tokens 64 \
            --repeats 3 --dtype "$dtype"
    done
}
tests_cuda() {  # the engine's tests that need neither the bundled real weights nor the app's packages
    TAIL=25 stage tests-cuda 180 env SPECDEC_TEST_DEVICE="$DEVICE" python3 -m pytest -q -p no:cacheprovider \
        -p no:benchmark -n 8 tests/test_lossless.py tests/test_batching.py tests/test_longform.py \
        tests/test_step.py tests/test_bench.py tests/test_no_speech.py tests/test_reuse.py \
        tests/test_streaming.py tests/test_self_draft.py tests/test_draft_cost.py tests/test_acceptance.py
}
graph_probe() { stage graph-probe 90 python3 scripts/gpu_graph_probe.py; }  # launch overhead, sized
small_benchmarks() {
    bench tokens-small-float16 90 tokens --size small --quick --dtype float16
    bench batch-small-float16 60 batch --size small --quick --batch-sizes 1 4 8 --dtype float16
}
case "$MODE" in
    smoke) tests_cuda; small_benchmarks ;;
    full) build_large; tokens_large_float16; graph_probe; batch_large_float16; tokens_large_other ;;
    all)
        build_large
        tokens_large_float16
        tests_cuda
        graph_probe
        batch_large_float16
        tokens_large_other
        small_benchmarks
        ;;
esac
tar -czf "$OUT/gpu-checks.tar.gz" -C "$OUT" --exclude gpu-checks.tar.gz . 2>/dev/null
echo "packed $(du -h "$OUT/gpu-checks.tar.gz" | cut -f1); exit $STATUS"
exit "$STATUS"
