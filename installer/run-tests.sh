#!/usr/bin/env bash
# Set everything up, then run the linter and the test suite. Extra arguments go to pytest.
# The tests build the tiny checkpoint themselves (python main.py build tiny) in a temp dir.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# System packages the tests use: espeak-ng speaks the test questions; PortAudio and a
# PulseAudio daemon give the audio tests a virtual sound card (a null sink).
if ! command -v espeak-ng >/dev/null || ! command -v pulseaudio >/dev/null \
        || ! ldconfig -p | grep -q libportaudio.so.2; then
    if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
        echo "Installing espeak-ng for the speech fixtures ..." >&2
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
            --no-install-recommends espeak-ng libportaudio2 pulseaudio pulseaudio-utils \
            libasound2-plugins >/dev/null
    else
        echo "The tests need espeak-ng, libportaudio2 and pulseaudio (apt-get install)." >&2
        exit 1
    fi
fi
bash "$ROOT/installer/bootstrap.sh" dev
VENV="${CONTEXTSPAN_VENV:-$ROOT/.venv}"
cd "$ROOT"
"$VENV/bin/python" -m ruff check .
exec "$VENV/bin/python" -m pytest "$@"
