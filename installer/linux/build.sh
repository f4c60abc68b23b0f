#!/usr/bin/env bash
# Build the packaged Linux app, a PyInstaller one-folder build in dist/ContextSpan/, with one
# command; --smoke-test then runs the packaged binary (installer/linux/smoke_test.sh).
#
#   installer/linux/build.sh [--smoke-test] [--python PYTHON] [--clean] [--dry-run]
#
# --python PYTHON  the Python whose packages are frozen (default: the project's .venv,
#                  made by installer/bootstrap.sh when missing); PyInstaller is added to it
# --clean          start from an empty PyInstaller work folder (build/pyinstaller)
# --dry-run        print the steps, change nothing
#
# Model weights are never bundled: the app downloads real checkpoints on first use and
# builds the tiny demo model itself. The bundle needs the system's libportaudio2 at run time.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PYTHON=""
SMOKE=0
CLEAN=0
DRY_RUN=0
while [ $# -gt 0 ]; do
    case "$1" in
        --smoke-test) SMOKE=1; shift ;;
        --python) PYTHON="$2"; shift 2 ;;
        --clean) CLEAN=1; shift ;;
        --dry-run) DRY_RUN=1; shift ;;
        -h|--help) sed -n '2,13p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "error: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done

step() { echo "==> $*"; }
run() {
    if [ "$DRY_RUN" = 1 ]; then echo "+ $*"; else "$@"; fi
}

cd "$ROOT"
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

if [ "$CLEAN" = 1 ]; then
    run rm -rf "$ROOT/build/pyinstaller"
fi
step "Freezing the app with PyInstaller (several minutes: torch is large)"
run rm -rf "$ROOT/dist/ContextSpan"
run "$PYTHON" -m PyInstaller --noconfirm --log-level WARN \
    --distpath "$ROOT/dist" --workpath "$ROOT/build/pyinstaller" \
    "$ROOT/installer/pyinstaller/contextspan.spec"

if [ "$DRY_RUN" = 0 ]; then
    weights="$(find "$ROOT/dist/ContextSpan" \( -name '*.safetensors' -o -name '*.pt' \
        -o -name 'tokenizer*.model' \) | head -5)"
    if [ -n "$weights" ]; then
        echo "error: model weights were bundled:" >&2
        echo "$weights" >&2
        exit 1
    fi
    step "Built $ROOT/dist/ContextSpan ($(du -sh "$ROOT/dist/ContextSpan" | cut -f1))"
    if ! { ldconfig -p 2>/dev/null || true; } | grep -q 'libportaudio\.so\.2'; then
        echo "note: libportaudio2 is not installed here; the app needs it for audio."
    fi
fi

if [ "$SMOKE" = 1 ]; then
    step "Smoke test of the packaged app"
    run bash "$ROOT/installer/linux/smoke_test.sh" "$ROOT/dist/ContextSpan"
fi
