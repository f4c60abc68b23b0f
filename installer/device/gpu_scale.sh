#!/usr/bin/env bash
# Issues 20 and 24 on a lent CUDA machine, in at most 9 minutes, everything under $OUT:
#   1. torch.profiler on block(600) + step and on steps (app/bench/gpu_profile.py):
#      profile.json, profile_block.txt, profile_step.txt, trace_block.json;
#   2. bench gpu --json, blocks 16/64/256/400/600/1024 and --slots 1,8,16,32,48,64:
#      gpu_bench.json (its stderr, with each slot count's row as it is done, in
#      gpu_bench.log);
#   3. before and after: with .baseline/ carried (fetch_baseline.sh: another commit's
#      engine), the same bench gpu --block 600 on that engine: baseline_bench.json, beside
#      this tree's step and block(600) in gpu_bench.json;
#   and this script's own log, gpu_scale.log. Eight files: the device tool brings back 8.
# The run tool's call: command "bash installer/device/gpu_scale.sh", carry [".whl",
# ".baseline"] (installer/device/fetch_wheels.sh and fetch_baseline.sh make them here),
# timeout_s 570.
# DRY=1: the same steps on this machine's CPU with the tiny checkpoints and small sizes,
# no wheels, no GPU (the test of this script).
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT" || exit 1
# shellcheck source=installer/device/carried_wheels.sh
. "$ROOT/installer/device/carried_wheels.sh"
OUT="${OUT:-/tmp/gpu_scale}"  # the device tool sets OUT: what it holds comes back
SITE="${SITE:-/tmp/site}"
PYTHON="${PYTHON:-python3}"
DRY="${DRY:-0}"
PROFILE_TIMEOUT="${PROFILE_TIMEOUT:-150}"
BENCH_TIMEOUT="${BENCH_TIMEOUT:-300}"  # with the profile and the set-up: under 8 minutes
BASELINE_TIMEOUT="${BASELINE_TIMEOUT:-90}"
BASELINE="${BASELINE:-.baseline}"  # another commit's engine (fetch_baseline.sh), if carried
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1

main() {
if [ "$DRY" = "1" ]; then
    PROFILE_ARGS=(--model tiny-cs --allow-cpu --block 16 --repeats 1 --steps 2)
    BENCH_ARGS=(--model tiny-cs --allow-cpu --block 4 --block 8 --repeats 1
                --slots '1,2' --slot-frames 13)
    BASELINE_ARGS=(--model tiny-cs --allow-cpu --block 8 --repeats 1)
else
    PROFILE_ARGS=(--block 600 --repeats 5 --steps 20)
    BENCH_ARGS=(--block 16 --block 64 --block 256 --block 400 --block 600 --block 1024
                --repeats 5 --slots '1,8,16,32,48,64' --slot-frames 40)
    BASELINE_ARGS=(--block 600 --repeats 5)
    install_carried_wheels "$PYTHON" "$SITE" || exit 1
fi

say_versions "$PYTHON" || exit 1

echo "== profile (block + step, steps)"
started=$SECONDS
timeout "$PROFILE_TIMEOUT" "$PYTHON" -m app.bench.gpu_profile --out "$OUT" \
    "${PROFILE_ARGS[@]}" >/dev/null
profile_rc=$?
echo "== profile: exit $profile_rc after $((SECONDS - started)) s"
[ -f "$OUT/profile.json" ] && cat "$OUT/profile.json" && echo
[ -f "$OUT/profile_block.txt" ] && head -n 40 "$OUT/profile_block.txt"

echo "== bench gpu (blocks and slots)"
started=$SECONDS
timeout "$BENCH_TIMEOUT" "$PYTHON" main.py bench gpu --json "${BENCH_ARGS[@]}" \
    >"$OUT/gpu_bench.json" 2>"$OUT/gpu_bench.log"
bench_rc=$?
echo "== bench gpu: exit $bench_rc after $((SECONDS - started)) s"
tail -n 20 "$OUT/gpu_bench.log"
cat "$OUT/gpu_bench.json"
echo

baseline_rc=0
if [ -d "$BASELINE/app" ]; then
    echo "== bench gpu on the baseline engine ($(cat "$BASELINE/COMMIT" 2>/dev/null))"
    started=$SECONDS
    (cd "$BASELINE" && timeout "$BASELINE_TIMEOUT" "$PYTHON" main.py bench gpu --json \
        "${BASELINE_ARGS[@]}" >"$OUT/baseline_bench.json" 2>>"$OUT/gpu_bench.log")
    baseline_rc=$?
    echo "== baseline: exit $baseline_rc after $((SECONDS - started)) s"
    cat "$OUT/baseline_bench.json"
    echo
else
    echo "== no $BASELINE/ carried: no before-and-after (installer/device/fetch_baseline.sh)"
fi
echo "== done in $SECONDS s: profile $profile_rc, bench $bench_rc, baseline $baseline_rc"
[ "$profile_rc" -eq 0 ] && [ "$bench_rc" -eq 0 ] && [ "$baseline_rc" -eq 0 ]
}

main 2>&1 | tee "$OUT/gpu_scale.log"
exit "${PIPESTATUS[0]}"
