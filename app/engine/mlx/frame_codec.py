"""The MLX engine's audio codec, one 80 ms frame at a time: Mimi on MLX or torch's Mimi.

"auto" is MLX's Mimi on Apple Silicon (the GPU, next to the LM) and torch's on the CPU
elsewhere: on a CPU, MLX's convolutions are the slower ones (measured on this project's
2-core Linux VM with a full-size Mimi: installer/README.md, "On a Mac"). Either gives the
LM the same codes (tests/engine/mlx/test_mlx_mimi.py).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Protocol

import numpy as np
import numpy.typing as npt
import torch
from moshi.models import MimiModel

from app.checkpoints.loader import LoadedCheckpoint
from app.checkpoints.tiny_builder import RANDOM_WEIGHTS_MARKER
from app.engine.device import on_apple_silicon
from app.moshi_internals import moshi_mimi_config

MIMI_CHOICES = ("auto", "mlx", "torch")

log = logging.getLogger(__name__)


class FrameCodec(Protocol):
    num_codebooks: int

    def encode_frame(self, pcm: npt.NDArray[np.float32]) -> npt.NDArray[np.int64]:
        """[1920] float32 PCM -> [num_codebooks] codes."""
        ...

    def decode_frame(self, codes: npt.NDArray[np.int64]) -> npt.NDArray[np.float32]:
        """[num_codebooks] codes -> [1920] float32 PCM."""
        ...

    def reset(self) -> None:
        """Forget the stream: the next frame is a first frame."""
        ...


class TorchFrameCodec:
    """The checkpoint's torch Mimi on the CPU; the engine's thread holds it streaming."""

    def __init__(self, mimi: MimiModel) -> None:
        self.mimi = mimi
        self.num_codebooks = mimi.num_codebooks

    @torch.no_grad()
    def encode_frame(self, pcm: npt.NDArray[np.float32]) -> npt.NDArray[np.int64]:
        codes = self.mimi.encode(torch.from_numpy(pcm)[None, None])  # [1, 8, 1]
        return codes[0, :, 0].numpy()

    @torch.no_grad()
    def decode_frame(self, codes: npt.NDArray[np.int64]) -> npt.NDArray[np.float32]:
        model_codes = torch.from_numpy(np.ascontiguousarray(codes, dtype=np.int64))
        return self.mimi.decode(model_codes[None, :, None])[0, 0].float().numpy()  # [1920]

    def reset(self) -> None:
        self.mimi.reset_streaming()


def mimi_backend(preference: str) -> str:
    """"mlx" or "torch" for the `--mimi` choice ("auto": MLX on Apple Silicon)."""
    if preference not in MIMI_CHOICES:
        raise ValueError(f"mimi {preference!r}: choose one of {', '.join(MIMI_CHOICES)}")
    if preference == "auto":
        return "mlx" if on_apple_silicon() else "torch"
    return preference


def make_frame_codec(checkpoint: LoadedCheckpoint, preference: str = "auto") -> FrameCodec:
    """The codec for `preference`, reading the Mimi weights file the torch loader read (or,
    for a random-weight checkpoint, which has none, the torch Mimi's own weights)."""
    if mimi_backend(preference) == "torch":
        log.info("Mimi on torch (CPU) for the MLX engine")
        return TorchFrameCodec(checkpoint.mimi)
    try:
        from app.engine.mlx.mlx_mimi import MimiConfigError, MlxMimi
    except ImportError as exc:
        raise ValueError(f"Mimi on MLX needs moshi_mlx ({exc}): pip install --no-deps "
                         "moshi_mlx==0.3.0, or choose --mimi torch") from exc
    info = checkpoint.info
    config = info.mimi_config or moshi_mimi_config()
    log.info("Mimi on MLX (moshi_mlx, %s) for the MLX engine", mx_device_name())
    if info.raw_config and info.raw_config.get(RANDOM_WEIGHTS_MARKER):
        return MlxMimi.from_torch(checkpoint.mimi, config)
    assert info.mimi_weights is not None  # the loader found the file
    try:
        return MlxMimi.load(Path(info.mimi_weights), config, checkpoint.mimi.num_codebooks)
    except MimiConfigError as exc:
        if preference != "auto":
            raise
        # Chosen for the user, not by them: the torch Mimi runs any Mimi, only slower.
        log.warning("Mimi on torch (CPU) for the MLX engine: %s", exc)
        return TorchFrameCodec(checkpoint.mimi)


def mx_device_name() -> str:
    import mlx.core as mx

    return "GPU" if mx.default_device() == mx.gpu else "CPU"
