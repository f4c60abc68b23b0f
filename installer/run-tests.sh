#!/usr/bin/env bash
# Set everything up, then run the linter and the test suite. Extra arguments go to pytest.
# The tests build the tiny checkpoint themselves (python main.py build tiny) in a temp dir.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/installer/bootstrap.sh" dev
VENV="${CONTEXTSPAN_VENV:-$ROOT/.venv}"
cd "$ROOT"
"$VENV/bin/python" -m ruff check .
exec "$VENV/bin/python" -m pytest "$@"
