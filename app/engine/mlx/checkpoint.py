"""A checkpoint loaded for the MLX engine: the torch loader's checkpoint (Mimi, the tokenizer,
the manifest, the files) with its LM converted to MLX at the chosen precision.

Mimi stays torch on the CPU for now (an MLX or rustymimi Mimi is a later step), so the
engine's audio path is the torch engine's own. The torch LM is loaded too (the loader builds
it with Mimi) and only its sizes are read; on a 7B that doubles the memory, which a loader
that skips the torch LM will remove.

This module imports mlx only when it loads: the app, the CLI and the assembler import it on
machines without mlx.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING

from app.checkpoints.loader import LoadedCheckpoint, load_checkpoint

if TYPE_CHECKING:
    from app.checkpoints.catalog import Manifest
    from app.engine.mlx.lm import MlxLm

# The MLX engine's precisions: 32- or 16-bit weights, or the linear layers at 8 or 4 bits.
MLX_PRECISIONS = ("fp32", "bf16", "q8", "q4")
_BITS = {"q8": 8, "q4": 4}
# What the transcript's header and EngineReady call each precision (torch's names for
# the float ones).
PRECISION_LABELS = {"fp32": "float32", "bf16": "bfloat16", "q8": "q8", "q4": "q4"}


@dataclass
class MlxCheckpoint(LoadedCheckpoint):
    mlx_lm: MlxLm
    precision: str  # one of MLX_PRECISIONS


def default_mlx_precision() -> str:
    """bf16 where MLX runs on the GPU (Apple Silicon); fp32 on a CPU, where bf16 matmuls
    are slow (as the torch loader's runtime_dtype chooses)."""
    import mlx.core as mx

    return "bf16" if mx.default_device() == mx.gpu else "fp32"


def load_mlx_checkpoint(manifest: Manifest, folder: Path, precision: str = "auto"
                        ) -> MlxCheckpoint:
    """The torch parts on the CPU and the LM on MLX at `precision` ("auto": see
    default_mlx_precision). 8 and 4 bits quantize a float LM at load: bf16 under it on the
    GPU, fp32 on a CPU."""
    import mlx.core as mx

    from app.engine.mlx.weights import load_mlx_lm

    if precision == "auto":
        precision = default_mlx_precision()
    if precision not in MLX_PRECISIONS:
        raise ValueError(f"precision {precision!r}: choose one of {', '.join(MLX_PRECISIONS)}")
    base = precision if precision in ("fp32", "bf16") else default_mlx_precision()
    dtype = mx.bfloat16 if base == "bf16" else mx.float32
    torch_part = load_checkpoint(manifest, folder, "cpu")
    mlx_lm = load_mlx_lm(manifest, Path(folder), dtype, _BITS.get(precision))
    loaded = {f.name: getattr(torch_part, f.name) for f in fields(LoadedCheckpoint)}
    return MlxCheckpoint(**loaded, mlx_lm=mlx_lm, precision=precision)
