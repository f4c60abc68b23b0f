"""A checkpoint loaded for the MLX engine: the torch loader's checkpoint (Mimi, the tokenizer,
the manifest, the files) with its LM converted to MLX at the chosen precision.

The torch Mimi loads here (the conversation start encodes with it); the engine streams its
frames through the codec it chooses (frame_codec.py: Mimi on MLX from the same weights file
on Apple Silicon, this torch Mimi elsewhere). The torch LM is never built: only Mimi and
the tokenizer load through torch (`lm` is None), so a 7B's memory is taken once, by MLX.
The converted LM is cached in the data dir (weights_cache.py): the next load reads it.

This module imports mlx only when it loads: the app, the CLI and the assembler import it on
machines without mlx.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from app.checkpoints.loader import LoadedCheckpoint, load_codec_and_tokenizer
from app.engine.precision import FLOAT_DTYPES, MLX_PRECISIONS

if TYPE_CHECKING:
    from app.checkpoints.catalog import Manifest
    from app.engine.mlx.lm import MlxLm

_BITS = {"q8": 8, "q4": 4}
# What the transcript's header and EngineReady call each precision (torch's names for
# the float ones).
PRECISION_LABELS = {**FLOAT_DTYPES, "q8": "q8", "q4": "q4"}


@dataclass
class MlxCheckpoint(LoadedCheckpoint):
    # No torch LM: the MLX engine reads its own (`mlx_lm`); nothing may run the torch one.
    lm: None  # type: ignore[assignment]
    mlx_lm: MlxLm
    precision: str  # one of MLX_PRECISIONS
    weights_notice: str | None = None  # the converted-weights cache rebuilt or not written


def default_mlx_precision() -> str:
    """bf16 where MLX runs on the GPU (Apple Silicon); fp32 on a CPU, where bf16 matmuls
    are slow (as the torch loader's runtime_dtype chooses)."""
    import mlx.core as mx

    return "bf16" if mx.default_device() == mx.gpu else "fp32"


def load_mlx_checkpoint(manifest: Manifest, folder: Path, precision: str = "auto", *,
                        cache_dir: Path | None = None,
                        on_progress: Callable[[str], None] | None = None) -> MlxCheckpoint:
    """Mimi and the tokenizer on the CPU and the LM on MLX at `precision` ("auto": see
    default_mlx_precision). 8 and 4 bits quantize a float LM at load: bf16 under it on the
    GPU, fp32 on a CPU. The converted LM comes from the cache when it holds this source and
    precision (`cache_dir`: the data dir's by default)."""
    import mlx.core as mx

    from app.engine.mlx.weights_cache import load_cached_mlx_lm

    if precision == "auto":
        precision = default_mlx_precision()
    if precision not in MLX_PRECISIONS:
        raise ValueError(f"precision {precision!r}: choose one of {', '.join(MLX_PRECISIONS)}")
    base = precision if precision in ("fp32", "bf16") else default_mlx_precision()
    dtype = mx.bfloat16 if base == "bf16" else mx.float32
    info, mimi, tokenizer = load_codec_and_tokenizer(manifest, folder, "cpu")
    cached = load_cached_mlx_lm(manifest, Path(folder), precision, dtype, _BITS.get(precision),
                                cache_dir=cache_dir, on_progress=on_progress)
    if cached.notice and on_progress is not None:
        on_progress(cached.notice)
    return MlxCheckpoint(manifest, Path(folder), info, mimi, None, tokenizer,
                         torch.device("cpu"), torch.float32, mlx_lm=cached.lm,
                         precision=precision, weights_notice=cached.notice)
