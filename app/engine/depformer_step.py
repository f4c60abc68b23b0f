"""The depformer's dep_q codebook steps of one frame, as moshi computes them, in fewer operators.

moshi runs the depformer as a streaming transformer entered anew for every frame: each of the
dep_q steps rebuilds, in every layer, its KV ring's write indexes, the positions of the ring's
slots and the causal mask from the streaming offsets, and the states are filled again each
frame (`bench step` counted 377 operators a codebook step on the 7B, 6,032 a frame in bf16:
two thirds of a step). Yet every frame runs the same dep_q positions from an empty state, so
all of that is known in advance: step i writes ring slot i % capacity and sees the slots a
precomputed mask leaves open. Here the rings are made once (moshi's own, `new_kv_ring`), the
dep_q masks once, and each step runs only what computes: the norms, the projections, one
attention, the gating, the head, the sampling.

Exact: the same moshi modules (norms, linears at any precision, embeddings, gating) on the same
values, the keys and values in the same ring slots, the attention given the same mask, so its
logits equal moshi's `forward_depformer` bit for bit (tests/engine/test_depformer_step.py).
A slot the mask closes may hold the previous frame's keys: its weight is exactly zero, as
moshi's empty slots' are.

This is also the piece `torch.compile` takes whole (app/engine/step_compile.py): moshi's own
layers cannot be traced in one graph (each enters an ExitStack, and their streaming offsets
are Python integers that change as they run); this has static shapes and no Python state.

Read against moshi 0.2.13's `LMModel.forward_depformer`, `StreamingTransformer.forward`,
`StreamingTransformerLayer` and `StreamingMultiheadAttention.forward` (the version
app/moshi_internals.py checks at import).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch
from moshi.models import LMModel
from moshi.modules.gating import gating_forward_generic
from moshi.modules.transformer import StreamingTransformerLayer
from moshi.utils.sampling import sample_token
from torch.nn import functional as F

from app.engine.layer_modules import LayerModules, layer_modules
from app.engine.lm_runtime import Sampling
from app.moshi_internals import as_in_moshis_layers, new_kv_ring


def unsupported(lm: LMModel) -> str | None:
    """Why this LM's depformer cannot run here (None: it can): moshi's path then runs it."""
    depformer = lm.depformer
    if depformer is None:
        return "the LM has no depformer"
    if depformer.positional_embedding != "none":
        return f"its depformer has a positional embedding ({depformer.positional_embedding})"
    for layer in depformer.layers:
        if not isinstance(layer, StreamingTransformerLayer) or layer.skip_self_attn:
            return "a depformer layer without self-attention"
        if layer.cross_attention is not None:
            return "a depformer layer with cross-attention"
        attention = layer.self_attn
        if not attention.causal or attention.rope is not None or attention.kv_repeat != 1:
            return "a depformer attention that is not causal, or rotary, or repeats its KV"
        if attention.context is None and not attention.weights_per_step:
            return "a depformer attention without a context"
        if layer.gating is None:
            return "a depformer layer without gating"
    return None


class StepModules(NamedTuple):
    """What one codebook step runs: its input projection and embedding, every layer's
    weights for the step, its norm and head."""

    into: torch.nn.Module
    embedding: torch.nn.Module
    layers: tuple[LayerModules, ...]
    norm: torch.nn.Module
    head: torch.nn.Module


def forward_depformer(modules: StepModules, rings: list[torch.Tensor], slot: torch.Tensor,
                      mask: torch.Tensor, heads: int, activation: Callable[..., torch.Tensor],
                      token: torch.Tensor, transformer_out: torch.Tensor) -> torch.Tensor:
    """moshi's forward_depformer for one codebook step: token [B, 1] and the temporal output
    [B, 1, dim] in, logits [B, 1, 1, card] out; each layer writes ring slot `slot` [1] and
    attends where `mask` [B, 1, 1, capacity] is open."""
    x = modules.into(transformer_out) + modules.embedding(token)
    dtype = x.dtype
    for layer, ring in zip(modules.layers, rings, strict=True):
        # moshi's _sa_block
        update = _attention(layer, ring, slot, mask, heads, layer.norm1(x))
        x = x.to(update) + layer.scale1(update)
        # moshi's _ff_block
        update = gating_forward_generic(layer.gating_in, layer.gating_out, activation,
                                        layer.norm2(x))
        x = x.to(update) + layer.scale2(update)
    x = x.to(dtype)
    return modules.head(modules.norm(x))[:, None]


def _attention(layer: LayerModules, ring: torch.Tensor, slot: torch.Tensor, mask: torch.Tensor,
               heads: int, x: torch.Tensor) -> torch.Tensor:
    batch = x.shape[0]
    projected = layer.in_proj(x)  # [B, 1, 3 * dim]
    # moshi's rearrange "b t (p h d) -> p b h t d", and its ring's write
    q, k, v = projected.view(batch, 1, 3, heads, -1).permute(2, 0, 3, 1, 4)
    ring[0].index_copy_(2, slot, k)
    ring[1].index_copy_(2, slot, v)
    out = F.scaled_dot_product_attention(q, ring[0], ring[1], mask, dropout_p=0.0)
    out = out.transpose(1, 2).reshape(batch, 1, -1)  # "b h t d -> b t (h d)"
    return layer.out_proj(out)


def codebook_step(modules: StepModules, rings: list[torch.Tensor], slot: torch.Tensor,
                  mask: torch.Tensor, heads: int, activation: Callable[..., torch.Tensor],
                  previous: torch.Tensor, transformer_out: torch.Tensor, greedy: bool,
                  temp: float, top_k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """One codebook step, sampled: the previous code [B] in, this one [B] and its logits
    [B, 1, 1, card] out. The piece torch.compile takes (step_compile.py): every step after
    the first has the same shapes, so one compiled graph serves them all (the first,
    embedding the text, has its own)."""
    logits = forward_depformer(modules, rings, slot, mask, heads, activation, previous[:, None],
                               transformer_out)
    return sample_token(logits.float(), not greedy, temp, top_k)[:, 0, 0], logits


CodebookStep = Callable[..., tuple[torch.Tensor, torch.Tensor]]  # codebook_step, or compiled


class DepformerSteps:
    """The dep_q codebook steps of one frame for `rows` rows: the text token [B] and the
    temporal transformer's output [B, 1, dim] in, the sampled codes [B, dep_q] out, each step
    fed the provided code (`targets`, `provided` [B, dep_q]) where there is one.
    `step`: what runs one codebook step (`codebook_step`, or it compiled)."""

    def __init__(self, lm: LMModel, sampling: Sampling, rows: int,
                 step: CodebookStep = codebook_step) -> None:
        reason = unsupported(lm)
        if reason is not None:
            raise ValueError(f"the depformer cannot run in fixed steps: {reason}")
        assert lm.depformer is not None
        self.step = step
        self._sampling = sampling
        self._dep_q = int(lm.dep_q)
        layers = [layer for layer in lm.depformer.layers
                  if isinstance(layer, StreamingTransformerLayer)]  # all (unsupported says)
        # The rings moshi would make, made once: [2, B, H, capacity, D] each.
        self._rings = [new_kv_ring(layer.self_attn, rows).cache for layer in layers]
        attention = layers[0].self_attn
        self._heads = int(attention.num_heads)
        gating = layers[0].gating
        first = gating[0] if isinstance(gating, torch.nn.ModuleList) else gating
        assert first is not None
        self._activation = first.activation
        capacity = int(self._rings[0].shape[3])
        self._slots = [torch.tensor([step % capacity], device=lm.device)
                       for step in range(self._dep_q)]
        self._masks = [_open_slots(step, capacity, attention.context, rows, lm.device)
                       for step in range(self._dep_q)]
        self._modules = [_step_modules(lm, layers, step) for step in range(self._dep_q)]
        self.logits: list[torch.Tensor] | None = None  # a list: each step's logits go in

    def __call__(self, text_token: torch.Tensor, transformer_out: torch.Tensor,
                 targets: torch.Tensor, provided: torch.Tensor) -> torch.Tensor:
        s = self._sampling
        previous = text_token
        sampled: list[torch.Tensor] = []
        # As in moshi's layers (its norms; the steps' own norms, moshi's outside its layers,
        # are the identity in every depformer it builds with depformer_norm unset).
        with as_in_moshis_layers(text_token.device):
            for step in range(self._dep_q):
                token, logits = self.step(self._modules[step], self._rings, self._slots[step],
                                          self._masks[step], self._heads, self._activation,
                                          previous, transformer_out, s.greedy, s.temp,
                                          s.top_k)
                sampled.append(token)  # [B]
                if self.logits is not None:  # a test's record (a copy: graphs reuse theirs)
                    self.logits.append(logits.clone())
                previous = torch.where(provided[:, step], targets[:, step], token)
        return torch.stack(sampled, dim=1)  # [B, dep_q]


def _step_modules(lm: LMModel, layers: list[StreamingTransformerLayer], step: int
                  ) -> StepModules:
    """The modules codebook step `step` runs, chosen as moshi's forward_depformer and its
    weights-per-step layers choose them."""
    assert lm.depformer_emb is not None and lm.depformer_text_emb is not None
    in_index = step if lm.depformer_multi_linear else 0
    schedule = lm.depformer_weights_per_step_schedule
    if lm.depformer_multi_linear and schedule is not None:
        in_index = schedule[in_index]
    chosen = []
    for layer in layers:
        attention = layer.self_attn
        projections = _weight_index(attention.weights_per_step_schedule, step) \
            if len(attention.in_projs) > 1 else 0
        gating = layer.gating
        if layer.weights_per_step:
            assert isinstance(gating, torch.nn.ModuleList)
            gating = gating[_weight_index(layer.weights_per_step_schedule, step)]
        chosen.append(layer_modules(layer, projections, gating))
    embedding = lm.depformer_text_emb if step == 0 else lm.depformer_emb[step - 1]
    return StepModules(lm.depformer_in[in_index], embedding, tuple(chosen),
                       lm.depformer_norms[step], lm.linears[step])


def _weight_index(schedule: list[int] | None, step: int) -> int:
    return step if schedule is None else schedule[step]


def _open_slots(step: int, capacity: int, context: int | None, rows: int,
                device: torch.device) -> torch.Tensor:
    """The mask moshi's ring and attention give position `step` of a frame, from an empty
    ring (RingKVCache.complete, then the causal mask): [rows, 1, 1, capacity] bool."""
    slots = torch.arange(capacity)
    end_index = step % capacity
    delta = slots - end_index
    positions = torch.where(delta <= 0, step + delta, step + delta - capacity)
    positions = torch.where(slots >= step + 1, torch.full_like(positions, -1), positions)
    before = step - positions
    mask = (positions >= 0) & (before >= 0)
    if context is not None:
        mask = mask & (before < context)
    return mask.view(1, 1, 1, capacity).expand(rows, 1, 1, capacity).to(device)
