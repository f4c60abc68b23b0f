#!/usr/bin/env bash
# Make (or refresh) the project's virtual environment. Sourced by run-app.sh and run-tests.sh.
# Idempotent: pip runs again only when pyproject.toml changed since the last setup.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${CONTEXTSPAN_VENV:-$ROOT/.venv}"
PYTHON="${PYTHON:-python3}"
# shellcheck source=installer/python_packages.sh
. "$ROOT/installer/python_packages.sh"

if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
    echo "ContextSpan needs Python 3.10 or newer ($PYTHON is $("$PYTHON" --version 2>&1))." >&2
    exit 1
fi

if [ ! -x "$VENV/bin/python" ]; then
    echo "Creating the virtual environment in $VENV ..." >&2
    if ! "$PYTHON" -m venv "$VENV" 2>/dev/null; then
        if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
            apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null
            "$PYTHON" -m venv "$VENV"
        else
            echo "Cannot create a virtual environment: install python3-venv first." >&2
            exit 1
        fi
    fi
fi

STAMP="$VENV/.contextspan-setup"
MODE="${1:-app}"
# Either file changing (the dependencies, or which of them this machine gets) reinstalls.
WANT="$(file_sha256 "$ROOT/pyproject.toml")$(file_sha256 "$ROOT/installer/python_packages.sh")-$MODE"
HAVE="$(cat "$STAMP" 2>/dev/null || true)"
# The dev install is the app's plus test tools: after run-tests.sh, run-app.sh has all it needs.
if [ "$MODE" = app ] && [ "$HAVE" = "${WANT%-app}-dev" ]; then
    WANT="$HAVE"
fi
if [ "$HAVE" != "$WANT" ]; then
    echo "Installing ContextSpan and its dependencies (torch is a few GB on first install) ..." >&2
    install_python_packages "" "$VENV/bin/python" "$ROOT" "$MODE"
    echo "$WANT" > "$STAMP"
fi
