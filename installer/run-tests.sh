#!/usr/bin/env bash
# Set everything up, then run the linter, the type checker and the test suite. Extra
# arguments go to pytest.
# The tests build the tiny checkpoint themselves (python main.py build tiny) in a temp dir.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# System packages the tests use: a virtual sound card (PortAudio + a PulseAudio null sink)
# and espeak-ng for spoken test questions.
bash "$ROOT/installer/system_packages.sh" tests
bash "$ROOT/installer/bootstrap.sh" dev
VENV="${CONTEXTSPAN_VENV:-$ROOT/.venv}"
cd "$ROOT"
"$VENV/bin/python" -m ruff check .
# The type check: what it checks, and how strictly, is in pyproject.toml ([tool.mypy]).
"$VENV/bin/python" -m mypy
exec "$VENV/bin/python" -m pytest "$@"
