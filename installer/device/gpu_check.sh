#!/usr/bin/env bash
# On the device machine, from the repository root, with .whl/ carried (fetch_wheels.sh made
# it here): install the wheels beside the machine's own packages, show the GPU and the
# versions, and run `python main.py bench gpu --json` into $OUT/gpu_bench.json.
# The run tool's call: command "bash installer/device/gpu_check.sh", carry [".whl"].
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT" || exit 1
OUT="${OUT:-/tmp/gpu_check}"  # the device tool sets OUT: what it holds comes back
SITE="${SITE:-/tmp/site}"
PYTHON="${PYTHON:-python3}"
BENCH_TIMEOUT="${BENCH_TIMEOUT:-420}"  # the bench itself takes 1-2 minutes on an H200
# More arguments for the bench, e.g. "--repeats 3" or, to try this script on a CPU,
# "--model tiny-cs --allow-cpu --block 4 --block 16".
read -r -a BENCH_ARGS <<<"${BENCH_ARGS:-}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1

shopt -s nullglob
wheels=(.whl/*.whl)
if [ "${#wheels[@]}" -eq 0 ]; then
    echo "no wheels in .whl/: run installer/device/fetch_wheels.sh here and carry .whl" >&2
    exit 1
fi
# --no-deps: moshi pins torch<2.10 and numpy<2.3; the machine's own torch must stay.
"$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$SITE" "${wheels[@]}" || exit 1
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"

nvidia-smi || echo "nvidia-smi failed"
"$PYTHON" - <<'PY' || exit 1
import moshi
import torch

name = torch.cuda.get_device_name() if torch.cuda.is_available() else None
print(f"python3 torch {torch.__version__}, CUDA {torch.version.cuda}, "
      f"available {torch.cuda.is_available()} ({name}); moshi {moshi.__version__} "
      f"from {moshi.__file__}")
PY
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
