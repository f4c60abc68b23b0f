"""Token choice on MLX: greedy (argmax, as torch's) or moshi's temperature + top-k sampling.

Sampled tokens cannot match torch's (another RNG); greedy ones must, and do.
"""

from __future__ import annotations

import mlx.core as mx

from app.engine.lm_runtime import Sampling

__all__ = ["Sampling", "sample"]


def sample(logits: mx.array, greedy: bool, temp: float, top_k: int) -> mx.array:
    """logits [B, card] -> tokens [B] (int32). temp <= 0 is greedy, as moshi's."""
    if greedy or temp <= 0:
        return mx.argmax(logits, axis=-1).astype(mx.int32)
    scaled = logits.astype(mx.float32) / temp
    if 0 < top_k < scaled.shape[-1]:
        threshold = mx.sort(scaled, axis=-1)[:, -top_k][:, None]  # the k-th largest
        scaled = mx.where(scaled < threshold, -mx.inf, scaled)
    return mx.random.categorical(scaled, axis=-1).astype(mx.int32)
