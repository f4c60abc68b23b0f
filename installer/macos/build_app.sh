#!/usr/bin/env bash
# Build ContextSpan.app (PyInstaller) and ContextSpan-<version>.dmg (hdiutil) on macOS.
#
#   installer/macos/build_app.sh [--python PYTHON] [--no-dmg] [--dry-run]
#
# On Apple Silicon the app runs the speech model on the GPU through MPS (picked automatically);
# on Intel Macs it runs on the CPU. PyPI's macOS torch wheels are CPU+MPS builds (no CUDA).
# Model weights are never bundled. UNTESTED on a Mac: written on Linux, where it passes
# bash -n, ShellCheck and --dry-run only.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PYTHON=""
DMG=1
DRY_RUN=0
while [ $# -gt 0 ]; do
    case "$1" in
        --python) PYTHON="$2"; shift 2 ;;
        --no-dmg) DMG=0; shift ;;
        --dry-run) DRY_RUN=1; shift ;;
        -h|--help) sed -n '2,9p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "error: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done

step() { echo "==> $*"; }
run() {
    if [ "$DRY_RUN" = 1 ]; then echo "+ $*"; else "$@"; fi
}

if [ "$DRY_RUN" = 0 ] && [ "$(uname -s)" != Darwin ]; then
    echo "error: build the macOS app on macOS (use --dry-run to see the steps)" >&2
    exit 1
fi

cd "$ROOT"
VERSION="$(sed -n 's/^version = "\(.*\)"/\1/p' "$ROOT/pyproject.toml" | head -1)"
if [ -z "$PYTHON" ]; then
    PYTHON="${CONTEXTSPAN_VENV:-$ROOT/.venv}/bin/python"
    if [ ! -x "$PYTHON" ]; then
        step "Making the project's virtual environment"
        run bash "$ROOT/installer/bootstrap.sh" app
    fi
fi

step "Checking PyInstaller"
if [ "$DRY_RUN" = 1 ] || ! "$PYTHON" -c 'import PyInstaller' 2>/dev/null; then
    run "$PYTHON" -m pip install --quiet "pyinstaller>=6.10"
fi

step "Freezing ContextSpan.app with PyInstaller"
run rm -rf "$ROOT/dist/ContextSpan" "$ROOT/dist/ContextSpan.app"
run "$PYTHON" -m PyInstaller --noconfirm --log-level WARN \
    --distpath "$ROOT/dist" --workpath "$ROOT/build/pyinstaller" \
    "$ROOT/installer/pyinstaller/contextspan.spec"

step "Checking the app starts (offscreen screenshot)"
SHOT="${TMPDIR:-/tmp}/contextspan-shot-$$"
run env QT_QPA_PLATFORM=offscreen CONTEXTSPAN_DATA_DIR="$SHOT/data" \
    "$ROOT/dist/ContextSpan.app/Contents/MacOS/ContextSpan" --screenshot "$SHOT/shot.png"

if [ "$DMG" = 1 ]; then
    DMG_PATH="$ROOT/dist/ContextSpan-$VERSION.dmg"
    step "Making $DMG_PATH"
    STAGE="$ROOT/build/dmg"
    run rm -rf "$STAGE" "$DMG_PATH"
    run mkdir -p "$STAGE"
    run cp -R "$ROOT/dist/ContextSpan.app" "$STAGE/"
    run ln -s /Applications "$STAGE/Applications"
    run hdiutil create -volname ContextSpan -srcfolder "$STAGE" -ov -format UDZO "$DMG_PATH"
fi
# The app is not signed or notarized: on first launch, right-click it and choose Open (or
# sign it: codesign --deep --sign "Developer ID Application: ..." dist/ContextSpan.app).
step "Done: $ROOT/dist/ContextSpan.app"
