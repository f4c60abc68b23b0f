#!/usr/bin/env bash
# Here (where PyPI is reachable): download into .whl/ the wheels that the device machine (an
# H200 with Python 3.12, its own torch and no network) lacks for `python main.py bench gpu`.
# Only moshi and platformdirs: everything else our import path needs is already there
# (installer/device/README.md). .whl/ is ignored and never committed.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
PYTHON="${PYTHON:-python3}"
WHEELS=(moshi==0.2.13 platformdirs==4.14.9)

exclude="$(git rev-parse --git-path info/exclude)"
mkdir -p "$(dirname "$exclude")"
grep -qxF '/.whl/' "$exclude" 2>/dev/null || echo '/.whl/' >>"$exclude"

rm -rf .whl  # one version of each: two stop the install there
mkdir .whl
"$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: \
    --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux1_x86_64 \
    -d .whl "${WHEELS[@]}"
ls -l .whl
du -sh .whl
