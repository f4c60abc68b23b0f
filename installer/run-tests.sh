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
# Two workers (pytest-xdist): the tests run torch on one thread each (tests/conftest.py), so
# one worker leaves the second core of a 2-core machine idle. A file runs whole on one worker
# (--dist loadfile: its module fixtures made once). CONTEXTSPAN_TEST_WORKERS=0 runs in this
# process alone.
# The 30 slowest tests close the output, so a slow test is seen where it is added.
exec "$VENV/bin/python" -m pytest -n "${CONTEXTSPAN_TEST_WORKERS:-2}" --dist loadfile \
    --durations=30 "$@"
