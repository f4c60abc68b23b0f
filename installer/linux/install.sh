#!/usr/bin/env bash
# Install ContextSpan for the current user on Linux: a virtual environment, a launcher in
# ~/.local/bin, a desktop entry and an icon. Idempotent: run it again to update.
#
#   installer/linux/install.sh [--prefix DIR] [--bin-dir DIR] [--torch pypi|cpu | --client]
#                              [--python PYTHON] [--system-deps] [--dry-run]
#   installer/linux/install.sh --uninstall [--purge] [--prefix DIR] [--bin-dir DIR]
#
# --prefix DIR   where the venv and a copy of the app go (default ~/.local/share/contextspan)
# --client       the thin client: no speech engine here (no torch, moshi or bitsandbytes,
#                about 0.6 GB instead of 8); the speech model and its recognition run on a
#                server (`python main.py serve` there, Settings → Speech engine → Server
#                here). Running this installer again without --client adds the engine.
# --torch pypi   torch from PyPI: the CUDA 12 build, which also runs on the CPU (default;
#                about 4.4 GB to download, the right choice with an NVIDIA GPU)
# --torch cpu    torch's CPU-only build from https://download.pytorch.org/whl/cpu (about
#                200 MB to download instead of 4.4 GB; for machines without an NVIDIA GPU)
#                To switch an existing install between the two, --uninstall first.
# --system-deps  apt-get install the system libraries (PortAudio, Qt's xcb libs) with sudo
# --dry-run      print the steps, change nothing
# --uninstall    remove the venv, the launcher, the desktop entry and the icon; --purge also
#                removes downloaded checkpoints, settings and caches
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# shellcheck source=installer/app_files.sh
. "$ROOT/installer/app_files.sh"
DATA_HOME="${XDG_DATA_HOME:-$HOME/.local/share}"
PREFIX="$DATA_HOME/contextspan"
BIN_DIR="$HOME/.local/bin"
PYTHON="${PYTHON:-python3}"
TORCH="pypi"
TORCH_ASKED=0
CLIENT=0
DRY_RUN=0
UNINSTALL=0
PURGE=0
SYSTEM_DEPS=0
CPU_INDEX="https://download.pytorch.org/whl/cpu"
# Debian/Ubuntu names: PortAudio for sounddevice; the xcb libraries Qt's X11 plugin loads.
APT_PACKAGES="libportaudio2 libxcb-cursor0 libxcb-icccm4 libxcb-keysyms1 libxcb-shape0 \
libxcb-xinerama0 libxcb-randr0 libxcb-render-util0 libxcb-image0 libxkbcommon-x11-0 libegl1"

usage() { sed -n '2,22p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

while [ $# -gt 0 ]; do
    case "$1" in
        --prefix) PREFIX="$2"; shift 2 ;;
        --bin-dir) BIN_DIR="$2"; shift 2 ;;
        --torch) TORCH="$2"; TORCH_ASKED=1; shift 2 ;;
        --client) CLIENT=1; shift ;;
        --python) PYTHON="$2"; shift 2 ;;
        --system-deps) SYSTEM_DEPS=1; shift ;;
        --dry-run) DRY_RUN=1; shift ;;
        --uninstall) UNINSTALL=1; shift ;;
        --purge) PURGE=1; shift ;;
        -h|--help) usage; exit 0 ;;
        *) echo "error: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done
case "$TORCH" in pypi|cpu) ;; *) echo "error: --torch is pypi or cpu" >&2; exit 2 ;; esac
if [ "$CLIENT" = 1 ] && [ "$TORCH_ASKED" = 1 ]; then
    echo "error: --client installs no torch: leave out --torch" >&2
    exit 2
fi

VENV="$PREFIX/venv"
SRC="$PREFIX/app"
LAUNCHER="$BIN_DIR/contextspan"
DESKTOP_FILE="$DATA_HOME/applications/contextspan.desktop"
ICON_PNG="$DATA_HOME/icons/hicolor/256x256/apps/contextspan.png"
ICON_SVG="$DATA_HOME/icons/hicolor/scalable/apps/contextspan.svg"

if [ "$UNINSTALL" = 1 ]; then
    step "Removing the launcher, desktop entry and icons"
    run rm -f "$LAUNCHER" "$DESKTOP_FILE" "$ICON_PNG" "$ICON_SVG"
    if command -v update-desktop-database >/dev/null; then
        run update-desktop-database -q "$DATA_HOME/applications" || true
    fi
    step "Removing ContextSpan from $PREFIX"
    run rm -rf "$VENV" "$SRC" "$SRC.new"
    run rm -f "$PREFIX/.install-stamp"
    if [ -d "$PREFIX" ]; then run rmdir --ignore-fail-on-non-empty "$PREFIX"; fi
    if [ "$PURGE" = 1 ]; then
        step "Removing checkpoints, settings and caches"
        run rm -rf "$DATA_HOME/ContextSpan" "${XDG_CONFIG_HOME:-$HOME/.config}/ContextSpan" \
            "${XDG_CACHE_HOME:-$HOME/.cache}/ContextSpan"
    else
        echo "Kept downloaded checkpoints and settings ($DATA_HOME/ContextSpan," \
            "${XDG_CONFIG_HOME:-$HOME/.config}/ContextSpan); --purge removes them."
    fi
    echo "ContextSpan is uninstalled."
    exit 0
fi

step "Checking Python ($PYTHON)"
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
    echo "error: ContextSpan needs Python 3.10 or newer; pass --python /path/to/python3" >&2
    exit 1
fi
if ! "$PYTHON" -c 'import venv, ensurepip' 2>/dev/null; then
    echo "error: $PYTHON cannot make virtual environments: install python3-venv" \
        "(sudo apt-get install python3-venv)" >&2
    exit 1
fi

if [ "$SYSTEM_DEPS" = 1 ]; then
    step "Installing system libraries with apt-get"
    SUDO=""
    [ "$(id -u)" != 0 ] && SUDO="sudo"
    # shellcheck disable=SC2086 # the package list is meant to split
    run $SUDO apt-get install -y --no-install-recommends $APT_PACKAGES
fi

GPU="none"
if command -v nvidia-smi >/dev/null 2>&1 || [ -e /proc/driver/nvidia/version ]; then
    GPU="nvidia"
fi
if [ "$CLIENT" = 1 ]; then
    step "The thin client: no speech engine here (no torch); the speech model runs on a server"
elif [ "$GPU" = nvidia ]; then
    step "NVIDIA GPU found: torch from PyPI (CUDA 12 build)"
    [ "$TORCH" = cpu ] && echo "note: --torch cpu was asked for: the GPU will not be used."
elif [ "$TORCH" = pypi ]; then
    step "No NVIDIA GPU found: torch from PyPI (its CUDA build also runs on the CPU," \
        "4.4 GB download); --torch cpu gets the 200 MB CPU-only build instead"
else
    step "No NVIDIA GPU found: torch's CPU-only build from $CPU_INDEX"
fi

copy_app_files "$ROOT" "$SRC" "$PREFIX"
make_venv "$PYTHON" "$VENV"

# pip runs again only when the dependencies or the torch choice changed.
STAMP="$PREFIX/.install-stamp"
KIND="$TORCH"
[ "$CLIENT" = 1 ] && KIND="client"
WANT="$(sha256sum "$ROOT/pyproject.toml" | cut -d' ' -f1)-$KIND"
if [ "$DRY_RUN" = 1 ] || [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$WANT" ]; then
    run "$VENV/bin/python" -m pip install --quiet --upgrade pip
    # Editable, from the copy: the app finds its model catalog (models/) next to app/.
    if [ "$CLIENT" = 1 ]; then
        step "Installing the ContextSpan client (about 0.6 GB on the first install)"
        run "$VENV/bin/python" -m pip install --quiet -e "$SRC"
    else
        step "Installing ContextSpan and its dependencies (a few GB on the first install)"
        if [ "$TORCH" = cpu ]; then
            run "$VENV/bin/python" -m pip install --quiet "torch>=2.2,<2.10" \
                --index-url "$CPU_INDEX"
        fi
        run "$VENV/bin/python" -m pip install --quiet -e "${SRC}[engine]"
    fi
    if [ "$DRY_RUN" = 1 ]; then echo "+ write $STAMP"; else echo "$WANT" >"$STAMP"; fi
else
    step "Dependencies are up to date"
fi

write_launcher "$LAUNCHER" "$BIN_DIR" "$VENV" "$SRC" installer/linux/install.sh

step "Adding the desktop entry and icon"
run mkdir -p "$(dirname "$DESKTOP_FILE")" "$(dirname "$ICON_PNG")" "$(dirname "$ICON_SVG")"
run cp "$ROOT/assets/contextspan.png" "$ICON_PNG"
run cp "$ROOT/assets/contextspan.svg" "$ICON_SVG"
sed -e "s|@EXEC@|$LAUNCHER|" "$ROOT/installer/linux/contextspan.desktop" \
    | write_file "$DESKTOP_FILE"
if command -v update-desktop-database >/dev/null; then
    run update-desktop-database -q "$(dirname "$DESKTOP_FILE")" || true
fi

step "Checking system libraries"
if ! { ldconfig -p 2>/dev/null || true; } | grep -q 'libportaudio\.so\.2'; then
    echo "warning: PortAudio is missing: audio will not work." \
        "Install it: sudo apt-get install libportaudio2 (or rerun with --system-deps)"
fi
if ! { ldconfig -p 2>/dev/null || true; } | grep -q 'libxcb-cursor\.so\.0'; then
    echo "warning: Qt's X11 plugin needs libxcb-cursor0 (and a few xcb libraries):" \
        "rerun with --system-deps or see the README's troubleshooting"
fi
case ":$PATH:" in
    *":$BIN_DIR:"*) ;;
    *) echo "note: $BIN_DIR is not on your PATH; add it to run 'contextspan' from a shell." ;;
esac

echo "ContextSpan is installed: run 'contextspan', or find it in your applications menu."
if [ "$CLIENT" = 1 ]; then
    echo "This is the thin client: in Settings → Speech model → Speech engine choose Server," \
        "its address and token, and \"Speech recognition on the server\"."
fi
