"""Pick the device the engine runs on: CUDA, then Apple MPS, then the CPU; or MLX.

"mlx" is the MLX engine (app/engine/mlx/): the LM on `mlx.core`, chosen automatically on
Apple Silicon where mlx imports (the 7B keeps real time there only through MLX), and
selectable anywhere it imports (`mlx[cpu]` on Linux). Its Mimi is MLX's on Apple Silicon and
torch's on the CPU elsewhere (app/engine/mlx/frame_codec.py).
"""

from __future__ import annotations

import platform
import sys

import torch

MLX = "mlx"


def mlx_importable() -> bool:
    try:
        import mlx.core  # noqa: F401
    except ImportError:
        return False
    return True


def on_apple_silicon() -> bool:
    return sys.platform == "darwin" and platform.machine() == "arm64"


def uses_mlx(preference: str | None = None) -> bool:
    """Whether the engine for `preference` is the MLX one: asked for ("mlx"; an error
    where mlx does not import), or "auto" on Apple Silicon with mlx installed."""
    if preference == MLX:
        if not mlx_importable():
            raise ValueError("device 'mlx' was asked for, but mlx does not import here "
                             "(pip install mlx; on Linux, mlx[cpu])")
        return True
    return (not preference or preference == "auto") and on_apple_silicon() and mlx_importable()


def choose_device(preference: str | None = None) -> torch.device:
    """The torch device. "mlx": the CPU, where the MLX engine's Mimi runs ("auto" stays
    torch's choice: the recogniser and the benchmarks still use the GPU or MPS)."""
    if preference == MLX and uses_mlx(preference):
        return torch.device("cpu")
    if preference and preference != "auto":
        device = torch.device(preference)
        if device.type == "cuda" and not torch.cuda.is_available():
            raise ValueError("device 'cuda' was asked for, but no CUDA GPU is available")
        if device.type == "mps" and not torch.backends.mps.is_available():
            raise ValueError("device 'mps' was asked for, but Apple MPS is not available")
        return device
    if torch.cuda.is_available():
        return torch.device("cuda")
    if torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def synchronize(device: torch.device) -> None:
    """Wait for queued device work, so that timings measure the work and not its launch."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()
