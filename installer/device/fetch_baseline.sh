#!/usr/bin/env bash
# The engine of another commit, for gpu_scale.sh's before-and-after: `git archive` of its
# app/, models/ and main.py into .baseline/ (or $BASELINE; ignored, never committed; about
# 2 MiB), which the device tool carries beside .whl/.
#   bash installer/device/fetch_baseline.sh [COMMIT]   (default: fc542db, the last commit
#   with the three engines)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
COMMIT="${1:-fc542db}"
BASELINE="${BASELINE:-$ROOT/.baseline}"
cd "$ROOT"
rm -rf "$BASELINE"
mkdir -p "$BASELINE"
git archive "$COMMIT" app models main.py | tar -x -C "$BASELINE"
git rev-parse --short "$COMMIT" > "$BASELINE/COMMIT"
echo "$BASELINE holds $(cat "$BASELINE/COMMIT")'s engine ($(du -sh "$BASELINE" | cut -f1))"
