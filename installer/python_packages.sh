#!/usr/bin/env bash
# The pip installs for this machine, chosen by `uname` (sourced by bootstrap.sh and
# macos/install.sh):
#
#   install_python_packages RUNNER PYTHON TARGET MODE
#
# RUNNER  a command that runs each pip command (install.sh's `run`, which only prints it
#         with --dry-run); "" runs them directly
# TARGET  the folder pip installs editable (the checkout, or an installed copy)
# MODE    app (the `engine` extra: the speech model on this computer), dev (the test tools
#         too), or client (the thin client: no torch, moshi or bitsandbytes; the speech
#         model on a server; about 0.6 GB instead of 8)
#
# - Apple silicon (Darwin arm64): the `mlx` extra and moshi_mlx, the speech model's path
#   there (app/engine/mlx). torch comes from PyPI, whose macOS wheels are the CPU+MPS build:
#   no CUDA wheel exists for macOS, and no other index is named.
# - An Intel Mac: no MLX build exists; the torch CPU path only.
# - Linux: the app as it is (PyPI's torch, or linux/install.sh --torch cpu); the dev install
#   (run-tests.sh) adds moshi_mlx to the dev extra's mlx[cpu], so CI runs the MLX tests.
#
# moshi_mlx 0.3.0 pins huggingface-hub<0.29, safetensors<0.6, sentencepiece==0.2 and mlx<0.27
# for its own scripts (its web UI, rustymimi, its downloads). ContextSpan imports only its
# Mimi modules, which need mlx and numpy, so it is installed without its dependencies:
# tests/engine/mlx/test_mlx_mimi.py runs that Mimi against torch's with our versions.
MOSHI_MLX="moshi_mlx==0.3.0"

# "mlx" where this machine gets the MLX path in MODE ($1), "none" for the thin client,
# else "torch".
python_packages_engine() {
    if [ "$1" = client ]; then
        echo none
    elif [ "$(uname -s)" = Darwin ] && [ "$(uname -m)" = arm64 ]; then
        echo mlx
    elif [ "$(uname -s)" = Linux ] && [ "$1" = dev ]; then
        echo mlx
    else
        echo torch
    fi
}

install_python_packages() {
    local runner="$1" python="$2" target="$3" mode="$4"
    local extras=""
    case "$mode" in
        dev) extras="dev" ;;  # the dev extra holds the engine's
        app) extras="engine" ;;
        client) ;;
        *) echo "unknown install mode $mode (app, dev or client)" >&2; return 2 ;;
    esac
    if [ "$mode" != client ] && [ "$(uname -s)" = Darwin ] && [ "$(uname -m)" = arm64 ]; then
        extras="${extras:+$extras,}mlx"
    fi
    local spec="$target"
    [ -n "$extras" ] && spec="${target}[${extras}]"
    # shellcheck disable=SC2086 # an empty RUNNER runs the command itself
    $runner "$python" -m pip install --quiet --upgrade pip
    # shellcheck disable=SC2086
    $runner "$python" -m pip install --quiet -e "$spec"
    if [ "$(python_packages_engine "$mode")" = mlx ]; then
        # shellcheck disable=SC2086
        $runner "$python" -m pip install --quiet --no-deps "$MOSHI_MLX"
    fi
}

# A file's SHA-256 (macOS has shasum, not sha256sum).
file_sha256() {
    if command -v sha256sum >/dev/null 2>&1; then
        sha256sum < "$1" | cut -d' ' -f1
    else
        shasum -a 256 < "$1" | cut -d' ' -f1
    fi
}
