# shellcheck shell=bash
# Sourced by gpu_check.sh and gpu_run.sh (on a lent device machine, from the repository
# root, with .whl/ carried: fetch_wheels.sh makes it): the steps they share.

# Install the carried wheels into SITE ($2) for PYTHON ($1), beside the machine's own
# packages, put SITE on PYTHONPATH and show the GPU. --no-deps: moshi pins torch<2.10 and
# numpy<2.3; the machine's own torch must stay.
install_carried_wheels() {
    local python="$1" site="$2"
    shopt -s nullglob
    local wheels=(.whl/*.whl)
    if [ "${#wheels[@]}" -eq 0 ]; then
        echo "no wheels in .whl/: run installer/device/fetch_wheels.sh here and carry .whl" >&2
        return 1
    fi
    "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$site" "${wheels[@]}" || return 1
    export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
    nvidia-smi || echo "nvidia-smi failed"
}

# Print the torch, CUDA, GPU and moshi versions PYTHON ($1) imports.
say_versions() {
    "$1" - <<'PY'
import moshi
import torch

name = torch.cuda.get_device_name() if torch.cuda.is_available() else None
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, available "
      f"{torch.cuda.is_available()} ({name}); moshi {moshi.__version__} from {moshi.__file__}")
PY
}
