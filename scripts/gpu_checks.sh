#!/usr/bin/env bash
# The GPU checks in two unattended calls on one machine, each stage under its own time limit and all of a
# call's within DEADLINE seconds of its start (a stage gets what is left, at most its own limit), in order
# of importance, so that a call cut short loses the least:
#
#   scripts/gpu_checks.sh engine   call 1 (carry .whl/engine): build the large-v3-size checkpoints, the
#                                  profile (`benchmarks profile`), the tests on CUDA, then the GPU record
#                                  (`benchmarks gpu`) in float16 at batch 1, 8 and 4
#   scripts/gpu_checks.sh app      call 2 (carry .whl/app): the app on CUDA (`benchmarks app`: a Compare
#                                  through gradio_client, /v1 through openai, 8 requests at once against
#                                  one after another), then the record's bfloat16 rows
#
# Each call installs its set of wheels (scripts/gpu_wheels.sh) into /tmp/site, unless that set (or the app's,
# which holds the engine's) is there from the call before on the same machine; the checkpoints (in
# ~/.cache/specdec) and the record (in LOGS) are kept there too, so on a warm machine the second call
# builds nothing and adds its rows to the first call's record. Logs and reports go to LOGS (gpu-out/,
# git-ignored), and are packed at the end into OUT (the device tool's folder there; else LOGS):
# gpu-checks-MODE.tar.gz (logs and JSON), traces-MODE.tar (the profile's traces) and summary-MODE.txt.
# Exit status: 1 if any stage failed or ran out of time. How to read the figures: docs/benchmarks.md,
# "On a GPU".
#
# Environment: DEVICE (cuda; DEVICE=cpu tries the whole script on a machine without a GPU, on the small
# demo models by default), SIZE (large-v3, or small), DTYPE (the record's: float16 for engine, bfloat16
# for app; float32 on a CPU), TOKENS (the record's per row: 64; 24 on a CPU, where the demo models' rows
# would seek past their first window), DEADLINE (570), LOGS (gpu-out), TESTS (the test files), WORKERS.
set -u
cd "$(dirname "$0")/.."
MODE=${1:-engine}
case "$MODE" in
    engine | app) ;;
    *) echo "usage: scripts/gpu_checks.sh engine|app" >&2 && exit 2 ;;
esac
DEVICE=${DEVICE:-cuda}
LOGS=${LOGS:-gpu-out}
DEADLINE=$(($(date +%s) + ${DEADLINE:-570}))
STATUS=0
export PYTHONUNBUFFERED=1
# the engine's tests that need neither the bundled real weights nor the app's packages; a replay test when
# the engine has one (it runs only on CUDA)
CUDA_TESTS="tests/test_lossless.py tests/test_batching.py tests/test_longform.py tests/test_step.py
    tests/test_bench.py tests/test_no_speech.py tests/test_reuse.py tests/test_streaming.py
    tests/test_self_draft.py tests/test_draft_cost.py tests/test_acceptance.py tests/test_host_reads.py
    $(ls tests/test_replay*.py 2>/dev/null)"
if [ "$DEVICE" = cpu ]; then  # the script itself, quickly: the tests run on the CPU in CI anyway
    SIZE=${SIZE:-small} DTYPE=${DTYPE:-float32} WORKERS=${WORKERS:-1} TOKENS=${TOKENS:-24}
    TESTS=${TESTS:-tests/test_step.py tests/test_acceptance.py}
else
    SIZE=${SIZE:-large-v3} WORKERS=${WORKERS:-8} TESTS=${TESTS:-$CUDA_TESTS} TOKENS=${TOKENS:-64}
    [ "$MODE" = engine ] && DTYPE=${DTYPE:-float16} || DTYPE=${DTYPE:-bfloat16}
fi
mkdir -p "$LOGS"
SUMMARY="$LOGS/summary-$MODE.txt"
: >"$SUMMARY"

install_wheels() {  # the mode's wheels into /tmp/site, unless the same (or the app's) set is there
    local set=.whl/$MODE stamp installed
    # none carried: the host's own packages; on a CPU try this machine's (the wheels are for the GPU
    # host's Python 3.12), unless WHEELS=1
    ls "$set"/*.whl >/dev/null 2>&1 || return 0
    [ "$DEVICE" = cpu ] && [ "${WHEELS:-0}" != 1 ] && return 0
    stamp="$MODE $(ls "$set" | sort | cksum | cut -d' ' -f1)"
    installed=$(cat /tmp/site/.specdec-wheels 2>/dev/null)
    if [ "$installed" != "$stamp" ] && ! { [ "$MODE" = engine ] && [ "${installed%% *}" = app ]; }; then
        rm -rf /tmp/site
        if ! python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
            "$set"/*.whl; then
            echo "could not install the wheels in $set" >&2
            exit 1
        fi
        echo "$stamp" >/tmp/site/.specdec-wheels
    fi
    export PYTHONPATH="/tmp/site:$PWD"
}

stage() {  # stage NAME SECONDS COMMAND...: run under min(SECONDS, time left), log to $LOGS/NAME.log
    local name=$1 limit=$2 left start rc
    shift 2
    left=$((DEADLINE - $(date +%s)))
    if [ "$left" -lt 20 ]; then
        echo "== $name: skipped, no time left" | tee -a "$SUMMARY"
        STATUS=1
        return
    fi
    [ "$left" -lt "$limit" ] && limit=$left
    start=$(date +%s)
    timeout "$limit" "$@" >"$LOGS/$name.log" 2>&1
    rc=$?
    [ "$rc" -ne 0 ] && STATUS=1
    echo "== $name: exit $rc after $(($(date +%s) - start)) s (limit $limit)" | tee -a "$SUMMARY"
    tail -n "${TAIL:-12}" "$LOGS/$name.log"
    echo
}

build() { stage build 150 python3 -c "import benchmarks.checkpoints as c; c.bench_models('$SIZE')"; }
profile() {
    TAIL=24 stage profile 150 python3 -m benchmarks profile --size "$SIZE" --device "$DEVICE" --dtype "$DTYPE" \
        --out "$LOGS/profile"
}
tests() {
    TAIL=25 stage tests 180 env SPECDEC_TEST_DEVICE="$DEVICE" python3 -m pytest -q -p no:cacheprovider \
        -p no:benchmark -n "$WORKERS" $TESTS
}
record() {  # the GPU record: rows of other dtypes already in the file (the call before) are kept
    TAIL=40 stage "record-$DTYPE" 600 python3 -m benchmarks gpu --size "$SIZE" --device "$DEVICE" \
        --dtypes "$DTYPE" --batch-sizes 1 8 4 --max-new-tokens "$TOKENS" --out "$LOGS/bench-gpu-graphs.json"
}
app() {
    local record=()
    [ -f "$LOGS/bench-gpu-graphs.json" ] && record=(--record "$LOGS/bench-gpu-graphs.json")
    TAIL=16 stage app 300 python3 -m benchmarks app --size "$SIZE" --device "$DEVICE" "${record[@]}" \
        --out "$LOGS/app"
}

install_wheels
{
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "no GPU"
    python3 -c "import sys, torch, transformers as t; print(sys.version.split()[0], 'torch', torch.__version__,
        'transformers', t.__version__)"
    echo "mode $MODE, device $DEVICE, size $SIZE, record dtype $DTYPE"
} | tee -a "$SUMMARY"
case "$MODE" in
    engine) build; profile; tests; record ;;
    app) build; app; record ;;
esac
PACK=${OUT:-$LOGS}
mkdir -p "$PACK"
traces=$(cd "$LOGS" && ls profile/*.json.gz 2>/dev/null)
[ "$MODE" = engine ] && [ -n "$traces" ] && tar -cf "$PACK/traces-$MODE.tar" -C "$LOGS" $traces
packed=$(mktemp)  # outside LOGS, which PACK may be
tar -czf "$packed" -C "$LOGS" --exclude '*.json.gz' --exclude '*.tar*' . && mv "$packed" "$PACK/gpu-checks-$MODE.tar.gz"
[ "$PACK" != "$LOGS" ] && cp "$SUMMARY" "$PACK/"
echo "packed into $PACK: $(cd "$PACK" && du -h gpu-checks-"$MODE".tar.gz traces-"$MODE".tar 2>/dev/null |
    tr '\n' ' ')exit $STATUS"
exit "$STATUS"
