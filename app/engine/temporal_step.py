"""The temporal transformer's step (one position per row) on moshi's streaming state, with what
every layer rebuilt for itself built once.

moshi's `forward_text` for one position runs, in each of the 7B's 32 layers, the KV ring's
bookkeeping (its write indexes, the positions of its slots, its end offsets), the attention
mask from them, the rotary angles from the layer's offset, and the offsets' updates: about 94
operators a layer in bf16 (`bench step`), though every layer's ring and offsets hold the same
values (they advance together: a step, a read, a rewind, a reset touch them all alike). Here
they are computed once per step from the first layer's, and each layer runs only its own
work: norms, products, the rotation of its queries and keys, its ring's write, one attention,
the gating. The state it reads and advances is moshi's own (the rings, their end offsets, the
offsets, the exec mask), so reads, resets, rewinds and the rows' scratch copy go on as before.

This is the temporal piece torch.compile takes (step_compile.py, `--compile`): the step's
setup (embeddings, angles, mask) as one graph, ONE layer as another (all 32 have the same
shapes: one compiled graph serves them), the state's advance and the text head as a third.
Uncompiled, the engine's step keeps moshi's `forward_text` (tests observe the step there).

Exact: moshi's operators on the same values (its ring's arithmetic, the mask's, apply_rope's,
in the same order), so the output and the text logits are forward_text's
(tests/engine/test_temporal_step.py). Read against moshi 0.2.13's `LMModel.forward_text`,
`StreamingTransformer`, `StreamingTransformerLayer`, `StreamingMultiheadAttention`,
`RingKVCache.complete` and `apply_rope` (the version app/moshi_internals.py checks).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from moshi.models import LMModel
from moshi.modules.gating import ActivationGating, gating_forward_generic
from moshi.modules.transformer import StreamingMultiheadAttention, StreamingTransformerLayer
from torch.nn import functional as F

from app.engine.layer_modules import LayerModules, layer_modules
from app.moshi_internals import as_in_moshis_layers, kv_ring, streaming_state


def unsupported(lm: LMModel) -> str | None:
    """Why this LM's temporal step cannot run here (None: it can)."""
    transformer = lm.transformer
    if transformer.positional_embedding not in ("rope", "none"):
        return f"a {transformer.positional_embedding} positional embedding"
    for layer in transformer.layers:
        if not isinstance(layer, StreamingTransformerLayer) or layer.skip_self_attn:
            return "a layer without self-attention"
        if layer.cross_attention is not None:
            return "a layer with cross-attention"
        if layer.weights_per_step:
            return "a layer with weights per step"
        attention = layer.self_attn
        if not attention.causal or attention.context is None:
            return "an attention that is not causal with a context"
        if attention.kv_repeat != 1:
            return "an attention that repeats its keys and values"
        if not isinstance(layer.gating, ActivationGating):
            return "a layer without gating"
    return None


class StepSetup(NamedTuple):
    """What every layer shares in one step: the rotation, the ring's write, the mask."""

    rotation: tuple[torch.Tensor, torch.Tensor] | None  # cos, sin [B, 1, 1, D/2]
    write: torch.Tensor  # [B, 1, 1, 1]: the ring slot each row writes (expanded per layer)
    mask: torch.Tensor  # [B, 1, 1, capacity] bool
    end: torch.Tensor  # [B]: the rings' end offsets after the step
    offset: torch.Tensor  # [B]: the attention offsets after the step


def setup(embeddings: list[torch.nn.Module], text_embedding: torch.nn.Module,
          codes: torch.Tensor, audio_offset: int, offset: torch.Tensor, end: torch.Tensor,
          exec_mask: torch.Tensor, capacity: int, context: int, head_dim: int,
          max_period: float | None) -> tuple[torch.Tensor, StepSetup]:
    """The embeddings' sum (moshi's order) and the step's shared setup, for codes [B, 17, 1],
    from the first layer's offset and ring end offset [B]."""
    x: torch.Tensor | None = None
    for index, embedding in enumerate(embeddings):
        emb = embedding(codes[:, index + audio_offset])
        x = emb if x is None else x + emb
    text = text_embedding(codes[:, 0])
    x = text if x is None else x + text
    batch, steps = codes.shape[0], 1
    rotation = None
    if max_period is not None:  # apply_rope's angles (time_before_heads=False)
        ds = torch.arange(head_dim // 2, device=codes.device, dtype=torch.float32)
        freqs = torch.exp(ds * (-math.log(max_period) * 2 / head_dim))
        ts = offset.float().view(-1, 1) + torch.arange(steps, device=codes.device,
                                                        dtype=torch.float32)
        ts = ts.view(batch, 1, -1, 1)
        rotation = (torch.cos(freqs * ts), torch.sin(freqs * ts))
    # RingKVCache.complete: where each row writes, then its slots' positions
    slots = torch.arange(capacity, device=end.device, dtype=torch.long)
    write = (torch.arange(steps, device=end.device, dtype=end.dtype) + end.view(-1, 1)) \
        % capacity
    last_offset = end.view(-1, 1) + steps - 1
    end_index = last_offset % capacity
    delta = slots - end_index
    positions = torch.where(delta <= 0, last_offset + delta, last_offset + delta - capacity)
    new_end = torch.where(exec_mask, end + steps, end)
    invalid = slots >= new_end.view(-1, 1)
    positions = torch.where(invalid, torch.full_like(positions, -1), positions)
    # StreamingMultiheadAttention's causal mask
    pos_k = positions[:, None]
    pos_q = offset.view(-1, 1, 1) + torch.arange(steps, device=offset.device,
                                                 dtype=torch.long).view(-1, 1)
    before = pos_q - pos_k
    mask = ((pos_k >= 0) & (before >= 0) & (before < context))[:, None]
    new_offset = torch.where(exec_mask, offset + steps, offset)
    assert x is not None
    return x, StepSetup(rotation, write.view(batch, 1, steps, 1), mask, new_end, new_offset)


def layer_step(layer: LayerModules, ring: torch.Tensor, shared: StepSetup, heads: int,
               activation: Callable[..., torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """One layer at one position per row: moshi's _sa_block then _ff_block. Writes the
    layer's ring [2, B, H, capacity, D] (its end offset advances with the others')."""
    update = _attention(layer, ring, shared, heads, layer.norm1(x))
    x = x.to(update) + layer.scale1(update)
    update = gating_forward_generic(layer.gating_in, layer.gating_out, activation,
                                    layer.norm2(x))
    return x.to(update) + layer.scale2(update)


def _attention(layer: LayerModules, ring: torch.Tensor, shared: StepSetup, heads: int,
               x: torch.Tensor) -> torch.Tensor:
    batch, steps = x.shape[:2]
    projected = layer.in_proj(x)
    # moshi's rearrange "b t (p h d) -> p b h t d"
    q, k, v = projected.view(batch, steps, 3, heads, -1).permute(2, 0, 3, 1, 4)
    if shared.rotation is not None:
        q, k = _rotate(q, k, shared.rotation)
    index = shared.write.expand(-1, k.shape[1], steps, k.shape[3])
    ring[0].scatter_(2, index, k)
    ring[1].scatter_(2, index, v)
    out = F.scaled_dot_product_attention(q, ring[0], ring[1], shared.mask, dropout_p=0.0)
    out = out.transpose(1, 2).reshape(batch, steps, -1)
    return layer.out_proj(out)


def _rotate(q: torch.Tensor, k: torch.Tensor, rotation: tuple[torch.Tensor, torch.Tensor]
            ) -> tuple[torch.Tensor, torch.Tensor]:
    """apply_rope's rotation (interleaved), the angles given."""
    rotr, roti = rotation
    half = q.shape[-1] // 2
    q = q.view(*q.shape[:-1], half, 2)
    k = k.view(*k.shape[:-1], half, 2)
    qr, qi = q[..., 0].float(), q[..., 1].float()
    kr, ki = k[..., 0].float(), k[..., 1].float()
    qor = qr * rotr - qi * roti
    qoi = qr * roti + qi * rotr
    kor = kr * rotr - ki * roti
    koi = kr * roti + ki * rotr
    dtype = q.dtype
    qo = torch.stack([qor.to(dtype), qoi.to(dtype)], dim=-1).view(*q.shape[:-2], 2 * half)
    ko = torch.stack([kor.to(dtype), koi.to(dtype)], dim=-1).view(*k.shape[:-2], 2 * half)
    return qo, ko


def finish(ends: list[torch.Tensor], offsets: list[torch.Tensor], totals: torch.Tensor,
           exec_mask: torch.Tensor, shared: StepSetup, norm: torch.nn.Module | None,
           head: torch.nn.Module, x: torch.Tensor, dtype: torch.dtype
           ) -> tuple[torch.Tensor, torch.Tensor]:
    """The state advanced (every ring's end offset, every attention's offset, the
    transformer's offsets: IN PLACE, a CUDA graph holds them) and the text head: the
    transformer's output [B, 1, dim] and the text logits [B, 1, 1, card]."""
    torch._foreach_copy_(ends, [shared.end] * len(ends))
    torch._foreach_copy_(offsets, [shared.offset] * len(offsets))
    totals.copy_(torch.where(exec_mask, totals + x.shape[1], totals))
    out = x.to(dtype)
    if norm is not None:
        out = norm(out)
    return out, head(out)[:, None]


Piece = Callable[..., Any]  # setup, layer_step or finish, or one of them compiled


class TemporalStep:
    """`forward_text` for codes [B, 17, 1] on the LM streaming at B rows (its rings widened
    already: made after them, it holds their tensors)."""

    def __init__(self, lm: LMModel, setup_piece: Piece = setup, layer_piece: Piece = layer_step,
                 finish_piece: Piece = finish) -> None:
        reason = unsupported(lm)
        if reason is not None:
            raise ValueError(f"the temporal step cannot run here: {reason}")
        self._lm = lm
        self._setup, self._layer, self._finish = setup_piece, layer_piece, finish_piece
        layers = [layer for layer in lm.transformer.layers
                  if isinstance(layer, StreamingTransformerLayer)]
        attentions: list[StreamingMultiheadAttention] = [layer.self_attn for layer in layers]
        rings = [kv_ring(attention) for attention in attentions]
        states = [streaming_state(attention) for attention in attentions]
        transformer_state = streaming_state(lm.transformer)
        if any(r is None for r in rings) or any(s is None for s in states) \
                or transformer_state is None:
            raise RuntimeError("the temporal step needs the LM streaming")
        self._rings = [r.cache for r in rings if r is not None]
        self._ends = [r.end_offset for r in rings if r is not None]
        self._offsets = [s.offset for s in states if s is not None]
        self._attention_states = [s for s in states if s is not None]
        self._layer_states = [streaming_state(layer) for layer in layers]
        self._totals = transformer_state.offsets
        self._exec_mask = transformer_state.exec_mask
        first = attentions[0]
        self._capacity = int(self._rings[0].shape[3])
        self._context = int(first.context or 0)
        self._heads = int(first.num_heads)
        self._head_dim = int(first.embed_dim // first.num_heads)
        rope = lm.transformer.rope
        self._max_period = None if rope is None else float(rope.max_period)
        self._modules = [layer_modules(layer) for layer in layers]
        gating = layers[0].gating
        assert isinstance(gating, ActivationGating)
        self._activation = gating.activation
        self._embeddings = list(lm.emb)

    def forward_text(self, codes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """moshi's forward_text(codes [B, 17, 1]): (transformer output [B, 1, dim], text
        logits [B, 1, 1, card])."""
        lm = self._lm
        x, shared = self._setup(self._embeddings, lm.text_emb, codes, lm.audio_offset,
                                self._offsets[0], self._ends[0], self._exec_mask,
                                self._capacity, self._context, self._head_dim,
                                self._max_period)
        dtype = x.dtype
        with as_in_moshis_layers(codes.device):  # the layers as moshi runs them (its norms)
            for modules, ring in zip(self._modules, self._rings, strict=True):
                x = self._layer(modules, ring, shared, self._heads, self._activation, x)
        out, text_logits = self._finish(self._ends, self._offsets, self._totals,
                                        self._exec_mask, shared, lm.out_norm or None,
                                        lm.text_linear, x, dtype)
        for state in (*self._attention_states, *self._layer_states):  # moshi's counts
            if state is not None:
                state.offset_cpu += codes.shape[-1]
        return out, text_logits

    __call__ = forward_text
