"""Which framework runs a loaded checkpoint: its LM runtime and its frame codec.

A checkpoint loaded for MLX (app/engine/mlx/checkpoint.py) runs on the MLX seam
(mlx/mlx_runtime.py), any other on torch's (torch_runtime.py, app/mimi_codec.py). The frame
loop never asks which: it drives the two objects this returns.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.checkpoints.loader import LoadedCheckpoint
from app.engine.lm_runtime import FrameCodec, LmRuntime, Sampling
from app.engine.speech_engine import EngineOptions
from app.engine.torch_precision import loaded_precision


class UnsupportedSamplingError(ValueError):
    """The checkpoint samples in a way this engine does not run (the message says which)."""


@dataclass(frozen=True)
class Framework:
    runtime: LmRuntime
    codec: FrameCodec
    # What runs, as EngineReady, the status bar and the header say it (one source of truth:
    # torch_precision.loaded_precision, read off the loaded layers).
    dtype_label: str


def framework_for(checkpoint: LoadedCheckpoint, options: EngineOptions, rows: int,
                  batched_mimi: bool = True) -> Framework:
    """The runtime and codec for an engine of `rows` rows on `checkpoint`. `options`: the
    engine-wide sampling (greedy) and the MLX engine's Mimi choice. `batched_mimi` (several
    rows on torch): Mimi in one batched call per frame, else one stream per row."""
    sampling = checkpoint.manifest.sampling
    choice = Sampling(greedy=options.greedy, temp=sampling.temp, temp_text=sampling.temp_text,
                      top_k=sampling.top_k, top_k_text=sampling.top_k_text)
    if sampling.cfg_coef != 1.0:
        raise UnsupportedSamplingError(
            f"{checkpoint.manifest.id} samples with classifier-free guidance (cfg_coef "
            f"{sampling.cfg_coef}); ContextSpan's engine does not run it")
    from app.engine.mlx.checkpoint import MlxCheckpoint

    if isinstance(checkpoint, MlxCheckpoint):
        from app.engine.mlx.frame_codec import make_frame_codec
        from app.engine.mlx.mlx_runtime import MlxCodec, MlxRuntime

        return Framework(MlxRuntime(checkpoint.mlx_lm, choice),
                         MlxCodec(make_frame_codec(checkpoint, options.mimi)),
                         loaded_precision(checkpoint))
    from app.engine.torch_runtime import TorchRuntime
    from app.mimi_codec import torch_codec

    return Framework(TorchRuntime(checkpoint.lm, choice, compile_step=options.compile_step,
                                  notify=options.warmup_notice),
                     torch_codec(checkpoint.mimi, rows, batched_mimi),
                     loaded_precision(checkpoint))
