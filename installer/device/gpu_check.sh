#!/usr/bin/env bash
# On the device machine, from the repository root, with .whl/ carried (fetch_wheels.sh made
# it here): install the wheels beside the machine's own packages, show the GPU and the
# versions, and run `python main.py bench gpu --json` into $OUT/gpu_bench.json.
# The run tool's call: command "bash installer/device/gpu_check.sh", carry [".whl"].
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT" || exit 1
# shellcheck source=installer/device/carried_wheels.sh
. "$ROOT/installer/device/carried_wheels.sh"
OUT="${OUT:-/tmp/gpu_check}"  # the device tool sets OUT: what it holds comes back
SITE="${SITE:-/tmp/site}"
PYTHON="${PYTHON:-python3}"
BENCH_TIMEOUT="${BENCH_TIMEOUT:-420}"  # the bench itself takes 1-2 minutes on an H200
# More arguments for the bench, e.g. "--repeats 3" or, to try this script on a CPU,
# "--model tiny-cs --allow-cpu --block 4 --block 16".
read -r -a BENCH_ARGS <<<"${BENCH_ARGS:-}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1

install_carried_wheels "$PYTHON" "$SITE" || exit 1
say_versions "$PYTHON" || exit 1
# Every module of the bench's import path is there, or this fails in seconds.
"$PYTHON" -c "import app.bench.gpu_bench" || exit 1

run_bench() {  # $1: the JSON file under $OUT; the log goes beside it
    local started=$SECONDS
    timeout "$BENCH_TIMEOUT" "$PYTHON" main.py bench gpu --json ${BENCH_ARGS[@]+"${BENCH_ARGS[@]}"} \
        >"$OUT/$1.json" 2>"$OUT/$1.log"
    local rc=$?
    echo "== bench gpu ($1): exit $rc after $((SECONDS - started)) s"
    tail -n 15 "$OUT/$1.log"
    cat "$OUT/$1.json"
    echo
    return "$rc"
}

run_bench gpu_bench
rc=$?
if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ "$SECONDS" -lt 200 ]; then
    # A failure of moshi's CUDA graphs on this torch should not cost the timings: once more
    # without graphs (the report then says cuda_graphs false).
    NO_CUDA_GRAPH=1 run_bench gpu_bench_eager
fi
exit "$rc"
