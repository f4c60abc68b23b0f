# shellcheck shell=bash
# Sourced by the desktop installers (linux/install.sh, macos/install.sh): what they share,
# written once. The caller sets DRY_RUN (1: print each step, change nothing).

step() { echo "==> $*"; }
# Run a command, or only print it with --dry-run.
run() {
    if [ "$DRY_RUN" = 1 ]; then echo "+ $*"; else "$@"; fi
}
# Write stdin to a file, or only say so with --dry-run.
write_file() {
    if [ "$DRY_RUN" = 1 ]; then echo "+ write $1"; cat >/dev/null; else cat >"$1"; fi
}

# Copy the app's files from the checkout ROOT to SRC, replacing SRC whole (through SRC.new,
# so a failed copy leaves the previous install in place).
copy_app_files() {
    local root="$1" src="$2" prefix="$3"
    step "Copying the app to $src"
    run mkdir -p "$prefix"
    run rm -rf "$src.new"
    run mkdir -p "$src.new"
    for item in app models assets docs main.py pyproject.toml README.md; do  # docs: Help
        run cp -R "$root/$item" "$src.new/"
    done
    run find "$src.new" -name __pycache__ -prune -exec rm -rf {} +
    run rm -rf "$src"
    run mv "$src.new" "$src"
}

# Make the virtual environment VENV with PYTHON, unless it is already there.
make_venv() {
    local python="$1" venv="$2"
    step "Making the virtual environment $venv"
    if [ ! -x "$venv/bin/python" ]; then
        run "$python" -m venv "$venv"
    else
        echo "(already there)"
    fi
}

# The launcher script LAUNCHER (in BIN_DIR) that starts the installed app; `made_by` names
# the installer in its comment.
write_launcher() {
    local launcher="$1" bin_dir="$2" venv="$3" src="$4" made_by="$5"
    step "Adding the launcher $launcher"
    run mkdir -p "$bin_dir"
    write_file "$launcher" <<LAUNCH
#!/bin/sh
# ContextSpan launcher (made by $made_by).
exec "$venv/bin/python" "$src/main.py" "\$@"
LAUNCH
    run chmod +x "$launcher"
}
