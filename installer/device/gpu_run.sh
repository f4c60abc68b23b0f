#!/usr/bin/env bash
# The one script for the next lent CUDA machine (issues 33 and 34), inside 8 minutes, each
# step with its own time limit, each figure written under $OUT the moment it is measured
# (the benches print every figure as a JSON line on stderr; stderr goes to the step's file):
#   1. blocks: bench gpu, blocks 16/64/256/400/600/1024 (step, block + step, exactness)
#        -> blocks.jsonl
#   2. slots: bench gpu --slots 1,16,32,48,64,80, stopping at the first count that fails
#      or misses the 80 ms frame; beside each, stock moshi's LMGen.step at that batch on
#      the same weights (the anchor), memory per conversation split, graphs, and the 1B
#      recogniser (random weights of its architecture) at that many rows
#        -> slots.jsonl
#   3. precisions: bench gpu --precision bf16,fp8,int4 (PRECISIONS overrides): each one's
#      step, block + step, memory and agreement with bf16
#        -> precision.jsonl
#   4. the profile: torch.profiler over block(600) + step and over steps (the kernels a
#      step launches: bench step counts the same operators on a CPU)
#        -> profile.json, profile_block.txt, profile_step.txt
#   and this script's own log, run.log: 7 files (the device tool brings back 8).
# COMPILE=1 adds, after the blocks, the same bench with the step compiled by torch.compile
# (--compile: its compile and its progress, the step, block(600) + step, exactness):
#        -> blocks_compiled.jsonl (the 8th file)
# within the same limits in all (445 s): the compiled step's 80 s come from the slots' and
# the precisions' (30 and 50 s less).
# The run tool's call: command "bash installer/device/gpu_run.sh", carry [".whl"]
# (installer/device/fetch_wheels.sh makes it here), timeout_s 540.
# DRY=1: the same steps on this machine's CPU with the tiny checkpoints and small sizes, no
# wheels, no GPU (tests/installer/test_gpu_run.py).
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT" || exit 1
# shellcheck source=installer/device/carried_wheels.sh
. "$ROOT/installer/device/carried_wheels.sh"
OUT="${OUT:-/tmp/gpu_run}"  # the device tool sets OUT: what it holds comes back
SITE="${SITE:-/tmp/site}"
PYTHON="${PYTHON:-python3}"
DRY="${DRY:-0}"
COMPILE="${COMPILE:-0}"
BLOCKS_TIMEOUT="${BLOCKS_TIMEOUT:-75}"
COMPILED_TIMEOUT="${COMPILED_TIMEOUT:-80}"
if [ "$COMPILE" = "1" ]; then  # the compiled blocks' 80 s, taken from these two
    SLOTS_TIMEOUT="${SLOTS_TIMEOUT:-130}"
    PRECISION_TIMEOUT="${PRECISION_TIMEOUT:-100}"
else
    SLOTS_TIMEOUT="${SLOTS_TIMEOUT:-160}"
    PRECISION_TIMEOUT="${PRECISION_TIMEOUT:-150}"
fi
PROFILE_TIMEOUT="${PROFILE_TIMEOUT:-60}"
PRECISIONS="${PRECISIONS:-bf16,fp8,int4}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1

# One bench step: $1 its name (its file: $OUT/$1.jsonl, stderr's figures then stdout's
# result), $2 its time limit, the rest the command. A step cut short keeps its figures.
step() {
    local name="$1" limit="$2"
    shift 2
    local started=$SECONDS
    echo "== $name (at most $limit s): $*"
    timeout "$limit" "$@" >"$OUT/$name.result" 2>"$OUT/$name.jsonl"
    local rc=$?
    cat "$OUT/$name.result" >>"$OUT/$name.jsonl"
    rm -f "$OUT/$name.result"
    echo "== $name: exit $rc after $((SECONDS - started)) s"
    grep '^{"figure"' "$OUT/$name.jsonl" | tail -n 12
    return "$rc"
}

main() {
if [ "$DRY" = "1" ]; then
    MODEL=(--model tiny-cs --allow-cpu)
    BLOCK_ARGS=(--block 4 --block 8 --repeats 1)
    COMPILED_ARGS=(--block 8 --repeats 1)
    SLOT_ARGS=(--block 4 --repeats 1 --slots '1,2,3' --slot-frames 13 --asr tiny-stt)
    PRECISION_ARGS=(--block 4 --repeats 1)
    PRECISIONS="${DRY_PRECISIONS:-fp32,int4}"
    PROFILE_ARGS=(--block 16 --repeats 1 --steps 2)
else
    MODEL=()
    BLOCK_ARGS=(--block 16 --block 64 --block 256 --block 400 --block 600 --block 1024
                --repeats 5)
    COMPILED_ARGS=(--block 600 --repeats 3)
    SLOT_ARGS=(--block 16 --repeats 1 --slots '1,16,32,48,64,80' --slot-frames 40
               --asr kyutai-stt-1b-en_fr)
    PRECISION_ARGS=(--block 16 --block 256 --repeats 3)
    PROFILE_ARGS=(--block 600 --repeats 5 --steps 20)
    install_carried_wheels "$PYTHON" "$SITE" || exit 1
fi
say_versions "$PYTHON" || exit 1

step blocks "$BLOCKS_TIMEOUT" "$PYTHON" main.py bench gpu --json ${MODEL[@]+"${MODEL[@]}"} \
    "${BLOCK_ARGS[@]}"
blocks_rc=$?
compiled_rc=0
if [ "$COMPILE" = "1" ]; then
    step blocks_compiled "$COMPILED_TIMEOUT" "$PYTHON" main.py bench gpu --json --compile \
        ${MODEL[@]+"${MODEL[@]}"} "${COMPILED_ARGS[@]}"
    compiled_rc=$?
    grep '^{"figure": "compil' "$OUT/blocks_compiled.jsonl" | tail -n 8
fi
step slots "$SLOTS_TIMEOUT" "$PYTHON" main.py bench gpu --json ${MODEL[@]+"${MODEL[@]}"} \
    "${SLOT_ARGS[@]}" --slots-until-miss
slots_rc=$?
step precision "$PRECISION_TIMEOUT" "$PYTHON" main.py bench gpu --json \
    ${MODEL[@]+"${MODEL[@]}"} --precision "$PRECISIONS" "${PRECISION_ARGS[@]}"
precision_rc=$?

echo "== profile (at most $PROFILE_TIMEOUT s)"
started=$SECONDS
timeout "$PROFILE_TIMEOUT" "$PYTHON" -m app.bench.gpu_profile --out "$OUT" \
    ${MODEL[@]+"${MODEL[@]}"} "${PROFILE_ARGS[@]}" >/dev/null
profile_rc=$?
rm -f "$OUT/trace_block.json"  # the Chrome trace: too large to bring back beside the rest
echo "== profile: exit $profile_rc after $((SECONDS - started)) s"
[ -f "$OUT/profile.json" ] && cat "$OUT/profile.json" && echo

echo "== done in $SECONDS s: blocks $blocks_rc, compiled $compiled_rc, slots $slots_rc," \
    "precision $precision_rc, profile $profile_rc"
[ "$blocks_rc" -eq 0 ] && [ "$compiled_rc" -eq 0 ] && [ "$slots_rc" -eq 0 ] \
    && [ "$precision_rc" -eq 0 ] && [ "$profile_rc" -eq 0 ]
}

main 2>&1 | tee "$OUT/run.log"
exit "${PIPESTATUS[0]}"
