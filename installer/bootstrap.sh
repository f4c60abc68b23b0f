#!/usr/bin/env bash
# Make (or refresh) the project's virtual environment. Sourced by run-app.sh and run-tests.sh.
# Idempotent: pip runs again only when pyproject.toml changed since the last setup.
#
#   bash installer/bootstrap.sh [app|dev|client]
#
# app (the default): the desktop app with the speech engine (torch, moshi); dev: that and the
# test tools; client: the thin client, for a speech model on a server (`python main.py
# serve` elsewhere): Qt, audio, the LLM side and the wire, no torch, moshi or bitsandbytes.
# CONTEXTSPAN_VENV chooses the venv's folder (default .venv in the checkout).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${CONTEXTSPAN_VENV:-$ROOT/.venv}"
PYTHON="${PYTHON:-python3}"
# shellcheck source=installer/python_packages.sh
. "$ROOT/installer/python_packages.sh"
MODE="${1:-app}"
case "$MODE" in
    app|dev|client) ;;
    *) echo "usage: bash installer/bootstrap.sh [app|dev|client] (not $MODE)" >&2; exit 2 ;;
esac

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
# Either file changing (the dependencies, or which of them this machine gets) reinstalls.
WANT="$(file_sha256 "$ROOT/pyproject.toml")$(file_sha256 "$ROOT/installer/python_packages.sh")-$MODE"
HAVE="$(cat "$STAMP" 2>/dev/null || true)"
# The dev install is the app's plus test tools, and the app's the client's plus the engine:
# a venv set up for more is not set up again for less.
BASE="${WANT%-"$MODE"}"
if { [ "$MODE" = app ] && [ "$HAVE" = "$BASE-dev" ]; } \
    || { [ "$MODE" = client ] && { [ "$HAVE" = "$BASE-app" ] || [ "$HAVE" = "$BASE-dev" ]; }; }; then
    WANT="$HAVE"
fi
if [ "$HAVE" != "$WANT" ]; then
    if [ "$MODE" = client ]; then
        echo "Installing the ContextSpan client (Qt, audio, the LLM side; no torch) ..." >&2
    else
        echo "Installing ContextSpan and its dependencies (torch is a few GB on first" \
            "install) ..." >&2
    fi
    install_python_packages "" "$VENV/bin/python" "$ROOT" "$MODE"
    echo "$WANT" > "$STAMP"
fi
