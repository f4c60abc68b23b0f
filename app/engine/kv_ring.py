"""Widen the temporal transformer's KV rings so that chunked prefill stays exact.

moshi sizes each attention ring to the model's context. A chunk of K positions written at
once then overwrites the K-1 oldest keys that the chunk's own first queries still attend
to, once the conversation is longer than the context window. With a ring of
context + K_max - 1 slots, every query still sees exactly the keys a one-at-a-time feed
would show it: the attention mask (delta < context) is unchanged, only storage grows.
"""

from __future__ import annotations

from moshi.models import LMModel
from moshi.modules.transformer import StreamingMultiheadAttention

from app.moshi_internals import kv_ring, ring_capacity, ring_end, widen_kv_ring


def widen_attention_rings(lm: LMModel, max_chunk: int) -> int:
    """Give every temporal attention layer room for a chunk of `max_chunk` positions.

    Must run right after streaming starts and before the first step (on CUDA the step
    graph is captured around the ring's tensors). Returns the new ring capacity.
    """
    capacity = 0
    for module in lm.transformer.modules():
        if not isinstance(module, StreamingMultiheadAttention) or module.cross_attention:
            continue
        ring = kv_ring(module)
        if ring is None or module.context is None:
            raise RuntimeError("widen_attention_rings needs the LM in streaming mode")
        if ring_end(ring) != 0:
            raise RuntimeError("widen_attention_rings must run before the first step")
        capacity = module.context + max(1, max_chunk) - 1
        if ring_capacity(ring) >= capacity:
            continue
        widen_kv_ring(module, capacity)
    return capacity
