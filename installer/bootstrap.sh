#!/usr/bin/env bash
# Make (or refresh) the project's virtual environment. Sourced by run-app.sh and run-tests.sh.
# Idempotent: pip runs again only when pyproject.toml changed since the last setup.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${CONTEXTSPAN_VENV:-$ROOT/.venv}"
PYTHON="${PYTHON:-python3}"

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
WANT="$(sha256sum < "$ROOT/pyproject.toml" | cut -d' ' -f1)-$MODE"
HAVE="$(cat "$STAMP" 2>/dev/null || true)"
# The dev install is the app's plus test tools: after run-tests.sh, run-app.sh has all it needs.
if [ "$MODE" = app ] && [ "$HAVE" = "${WANT%-app}-dev" ]; then
    WANT="$HAVE"
fi
if [ "$HAVE" != "$WANT" ]; then
    EXTRAS=""
    [ "${1:-app}" = "dev" ] && EXTRAS="[dev]"
    echo "Installing ContextSpan and its dependencies (torch is a few GB on first install) ..." >&2
    "$VENV/bin/python" -m pip install --quiet --upgrade pip
    "$VENV/bin/python" -m pip install --quiet -e "$ROOT$EXTRAS"
    echo "$WANT" > "$STAMP"
fi
