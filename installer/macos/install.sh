#!/usr/bin/env bash
# Install ContextSpan for the current user on macOS: a virtual environment with the MLX
# path on Apple silicon, a launcher in ~/.local/bin and ContextSpan.app in ~/Applications.
# Idempotent: run it again to update.
#
#   installer/macos/install.sh [--prefix DIR] [--bin-dir DIR] [--apps-dir DIR]
#                              [--python PYTHON] [--client] [--dry-run]
#   installer/macos/install.sh --uninstall [--purge] [--prefix DIR] [--bin-dir DIR]
#                              [--apps-dir DIR]
#
# --prefix DIR    where the venv and a copy of the app go (default ~/.local/share/contextspan)
# --bin-dir DIR   the launcher's folder (default ~/.local/bin)
# --apps-dir DIR  where ContextSpan.app goes (default ~/Applications)
# --python PY     the Python 3.10+ to build the venv from (default python3)
# --client        the thin client: no speech engine here (no torch, moshi, MLX); the speech
#                 model and its recognition run on a server (`python main.py serve`)
# --dry-run       print the steps, change nothing (runs on any system)
# --uninstall     remove the venv, the launcher and the app; --purge also removes downloaded
#                 checkpoints, settings and caches
#
# On Apple silicon it installs the `mlx` extra and moshi_mlx (without its pins, see
# python_packages.sh): the speech model runs on the GPU through MLX, with 8- or 4-bit
# weights. torch is PyPI's macOS wheel (CPU+MPS; no CUDA build exists for macOS). UNTESTED on
# a Mac: written on Linux, where it passes bash -n, ShellCheck and --dry-run with a faked
# uname (tests/installer).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# shellcheck source=installer/python_packages.sh
. "$ROOT/installer/python_packages.sh"
# shellcheck source=installer/app_files.sh
. "$ROOT/installer/app_files.sh"
PREFIX="$HOME/.local/share/contextspan"
BIN_DIR="$HOME/.local/bin"
APPS_DIR="$HOME/Applications"
PYTHON="${PYTHON:-python3}"
DRY_RUN=0
MODE=app
UNINSTALL=0
PURGE=0

usage() { sed -n '2,25p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

while [ $# -gt 0 ]; do
    case "$1" in
        --prefix) PREFIX="$2"; shift 2 ;;
        --bin-dir) BIN_DIR="$2"; shift 2 ;;
        --apps-dir) APPS_DIR="$2"; shift 2 ;;
        --python) PYTHON="$2"; shift 2 ;;
        --client) MODE=client; shift ;;
        --dry-run) DRY_RUN=1; shift ;;
        --uninstall) UNINSTALL=1; shift ;;
        --purge) PURGE=1; shift ;;
        -h|--help) usage; exit 0 ;;
        *) echo "error: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done

if [ "$DRY_RUN" = 0 ] && [ "$(uname -s)" != Darwin ]; then
    echo "error: this is the macOS installer (on Linux: installer/linux/install.sh;" \
        "--dry-run shows the steps anywhere)" >&2
    exit 1
fi

VENV="$PREFIX/venv"
SRC="$PREFIX/app"
LAUNCHER="$BIN_DIR/contextspan"
APP="$APPS_DIR/ContextSpan.app"
SUPPORT="$HOME/Library/Application Support/ContextSpan"  # checkpoints and settings

if [ "$UNINSTALL" = 1 ]; then
    step "Removing the launcher and ContextSpan.app"
    run rm -rf "$LAUNCHER" "$APP"
    step "Removing ContextSpan from $PREFIX"
    run rm -rf "$VENV" "$SRC" "$SRC.new"
    run rm -f "$PREFIX/.install-stamp"
    if [ -d "$PREFIX" ] && [ -z "$(ls -A "$PREFIX")" ]; then run rmdir "$PREFIX"; fi
    if [ "$PURGE" = 1 ]; then
        step "Removing checkpoints, settings and caches"
        run rm -rf "$SUPPORT" "$HOME/Library/Caches/ContextSpan" "$HOME/Library/Logs/ContextSpan"
    else
        echo "Kept downloaded checkpoints and settings ($SUPPORT); --purge removes them."
    fi
    echo "ContextSpan is uninstalled."
    exit 0
fi

step "Checking Python ($PYTHON)"
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
    echo "error: ContextSpan needs Python 3.10 or newer (python.org's installer, or" \
        "brew install python@3.12); pass --python /path/to/python3" >&2
    exit 1
fi

ENGINE="$(python_packages_engine "$MODE")"
if [ "$ENGINE" = none ]; then
    step "The thin client: no speech engine here (no torch, MLX); the speech model runs on" \
        "a server"
elif [ "$ENGINE" = mlx ]; then
    step "Apple silicon: the speech model on MLX (mlx, moshi_mlx), torch's macOS wheel" \
        "(CPU+MPS) for the rest"
else
    step "An Intel Mac: MLX does not run here, so the speech model runs on torch's CPU," \
        "too slow for the 7B in real time (run the speech engine on a server: README)"
fi

copy_app_files "$ROOT" "$SRC" "$PREFIX"
make_venv "$PYTHON" "$VENV"

# pip runs again only when the dependencies (or which of them this machine gets) changed.
STAMP="$PREFIX/.install-stamp"
WANT="$(file_sha256 "$ROOT/pyproject.toml")$(file_sha256 "$ROOT/installer/python_packages.sh")"
[ "$MODE" = client ] && WANT="$WANT-client"
if [ "$DRY_RUN" = 1 ] || [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$WANT" ]; then
    step "Installing ContextSpan and its dependencies (about 1 GB on the first install)"
    install_python_packages run "$VENV/bin/python" "$SRC" "$MODE"
    if [ "$DRY_RUN" = 1 ]; then echo "+ write $STAMP"; else echo "$WANT" >"$STAMP"; fi
else
    step "Dependencies are up to date"
fi

write_launcher "$LAUNCHER" "$BIN_DIR" "$VENV" "$SRC" installer/macos/install.sh

step "Adding $APP"
run mkdir -p "$APP/Contents/MacOS" "$APP/Contents/Resources"
run cp "$ROOT/assets/contextspan.icns" "$APP/Contents/Resources/contextspan.icns"
write_file "$APP/Contents/MacOS/ContextSpan" <<LAUNCH
#!/bin/sh
exec "$VENV/bin/python" "$SRC/main.py" "\$@"
LAUNCH
run chmod +x "$APP/Contents/MacOS/ContextSpan"
VERSION="$(sed -n 's/^version = "\(.*\)"/\1/p' "$ROOT/pyproject.toml" | head -1)"
# The microphone prompt names the app and says why (macOS asks once, on the first start).
write_file "$APP/Contents/Info.plist" <<PLIST
<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<plist version="1.0">
<dict>
    <key>CFBundleName</key><string>ContextSpan</string>
    <key>CFBundleIdentifier</key><string>org.contextspan.app</string>
    <key>CFBundleExecutable</key><string>ContextSpan</string>
    <key>CFBundleIconFile</key><string>contextspan.icns</string>
    <key>CFBundlePackageType</key><string>APPL</string>
    <key>CFBundleShortVersionString</key><string>$VERSION</string>
    <key>LSMinimumSystemVersion</key><string>13.5</string>
    <key>NSMicrophoneUsageDescription</key>
    <string>ContextSpan listens to you to hold a spoken conversation.</string>
</dict>
</plist>
PLIST

case ":$PATH:" in
    *":$BIN_DIR:"*) ;;
    *) echo "note: $BIN_DIR is not on your PATH; add it to run 'contextspan' from a shell." ;;
esac
echo "ContextSpan is installed: open ContextSpan in $APPS_DIR, or run 'contextspan'."
