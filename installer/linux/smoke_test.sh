#!/usr/bin/env bash
# Smoke test of a packaged build: launch the GUI offscreen for a screenshot, then run a headless
# tiny-model conversation with an injected span, through the packaged binary only.
#
#   installer/linux/smoke_test.sh [DIST_FOLDER]     (default dist/ContextSpan)
#
# Everything it writes (the tiny checkpoint, settings) goes to a temporary folder.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
DIST="$(cd "${1:-$ROOT/dist/ContextSpan}" && pwd)"
BIN="$DIST/ContextSpan"
[ -x "$BIN" ] || { echo "error: no packaged app at $BIN (run installer/linux/build.sh)" >&2; exit 1; }

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
# The packaged app must not need the source tree, the user's data or a Python on PATH.
export CONTEXTSPAN_DATA_DIR="$WORK/data"
export XDG_CONFIG_HOME="$WORK/config" XDG_CACHE_HOME="$WORK/cache"
export QT_QPA_PLATFORM=offscreen
cd "$WORK"
SMOKE_PATH="/usr/bin:/bin"

fail() { echo "SMOKE TEST FAILED: $*" >&2; exit 1; }

echo "--- 1/4 the catalog and the -m dispatch: ContextSpan models"
env PATH="$SMOKE_PATH" "$BIN" models | tee models.txt
grep -q '^tiny ' models.txt || fail "the catalog has no tiny model"
# The app trains the tiny tokenizer in a child run as `sys.executable -m ...`: in the bundle
# sys.executable is this binary, whose entry point sends `-m app.*` to that module.
env PATH="$SMOKE_PATH" "$BIN" -m app.checkpoints.tokenizer_trainer --out "$WORK/spm.model" \
    --vocab-size 300 || fail "ContextSpan -m app.checkpoints.tokenizer_trainer failed"
[ -s "$WORK/spm.model" ] || fail "the tokenizer trainer wrote nothing"

echo "--- 2/4 the desktop app, offscreen: ContextSpan --screenshot"
start=$(date +%s)
env PATH="$SMOKE_PATH" timeout 600 "$BIN" --screenshot "$WORK/shot.png" \
    || fail "--screenshot exited with $?"
[ -s "$WORK/shot.png" ] || fail "no screenshot written"
[ "$(head -c 8 "$WORK/shot.png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] \
    || fail "the screenshot is not a PNG"
mkdir -p "$ROOT/build" && cp "$WORK/shot.png" "$ROOT/build/smoke-screenshot.png"
echo "screenshot: $(stat -c %s "$WORK/shot.png") bytes in $(( $(date +%s) - start )) s"

echo "--- 3/4 a headless conversation on the tiny model with an injected span"
# A 3 s, 24 kHz mono input: a vowel-like tone (the tiny model only needs audio frames).
python3 - <<'PY'
import math
import struct
import wave

samples = (8000 * math.sin(2 * math.pi * 220 * i / 24000) * (0.6 + 0.4 * math.sin(i / 3000))
           for i in range(3 * 24000))
with wave.open("in.wav", "wb") as w:
    w.setnchannels(1)
    w.setsampwidth(2)
    w.setframerate(24000)
    w.writeframes(b"".join(struct.pack("<h", int(s)) for s in samples))
PY
start=$(date +%s)
env PATH="$SMOKE_PATH" timeout 600 "$BIN" run --model tiny --input in.wav --output out.wav \
    --transcript t.jsonl --inject "hello" --at 1 || fail "run exited with $?"
echo "run: $(( $(date +%s) - start )) s"

echo "--- 4/4 checking the outputs"
python3 - <<'PY' || fail "the outputs are wrong"
import json
import wave

with wave.open("out.wav") as w:
    rate, frames = w.getframerate(), w.getnframes()
assert rate == 24000, f"output rate {rate}"
assert frames >= 24000 * 2, f"only {frames} output samples"
records = [json.loads(line) for line in open("t.jsonl", encoding="utf-8") if line.strip()]
spans = [r for r in records if r.get("type") == "span"]
assert spans and spans[0]["text"] == "hello", f"no injected span in {len(records)} records"
print(f"out.wav: {frames / rate:.2f} s at {rate} Hz; transcript: {len(records)} records, "
      f"span {spans[0]['text']!r} in {spans[0]['positions']} positions")
PY
ls "$CONTEXTSPAN_DATA_DIR"/checkpoints/tiny >/dev/null || fail "the tiny checkpoint was not built"

echo "SMOKE TEST PASSED ($DIST, $(du -sh "$DIST" | cut -f1))"
