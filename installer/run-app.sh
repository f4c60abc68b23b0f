#!/usr/bin/env bash
# Set everything up, then launch ContextSpan. Extra arguments go to main.py.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/installer/system_packages.sh" app   # PortAudio and Qt's display libraries
bash "$ROOT/installer/bootstrap.sh" app
VENV="${CONTEXTSPAN_VENV:-$ROOT/.venv}"
cd "$ROOT"
exec "$VENV/bin/python" main.py "$@"
