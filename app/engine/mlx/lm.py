"""Moshi's LM on MLX: the temporal transformer over the 17 streams, and the depformer.

Written on `mlx.core`/`mlx.nn` from the torch model's behaviour (moshi 0.2.13's `LMModel`,
`StreamingTransformer`, `RingKVCache`), not on `moshi_mlx`'s modules: its transformer passes
no causal mask when a call holds several positions (a span's positions would see each other
both ways), its rotating cache appends a multi-position write after the ring's storage
order rather than by position, and its window keeps context + 1 keys where torch keeps
context. The engine's contract is the torch engine's columns and tokens, exactly.

Parameters carry the torch model's names (`transformer.layers.0.self_attn.in_projs.0.weight`,
`depformer.layers.0.gating.3.linear_in.weight`, ...), so a state dict converts key by key
(weights.py). The streaming state lives outside the modules, in `TemporalStream` (the KV
rings and the position offset) and `DepformerStream` (one frame's depformer keys).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import mlx.core as mx
import mlx.nn as nn

from app.engine.mlx.kv_ring import KVRing, SharedMask

ZERO_TOKEN = -1  # embeds to an exact zero vector (moshi's zero_token_id)


class UnsupportedArchitectureError(ValueError):
    """The checkpoint's LM uses an option this MLX model does not implement."""


_NORM_EPS = {"rms_norm_f32": 1e-8, "rms_norm": 1e-5}


@dataclass(frozen=True)
class LmShape:
    """The LM's architecture, read from the same config dict moshi's loader builds from."""

    dim: int
    text_card: int
    n_q: int
    dep_q: int
    card: int
    num_heads: int
    num_layers: int
    dim_feedforward: int
    context: int
    max_period: float
    norm: str
    positional_embedding: str
    layer_scale: float | None
    depformer_dim: int
    depformer_dim_feedforward: int
    depformer_num_heads: int
    depformer_num_layers: int
    depformer_multi_linear: bool
    depformer_weights_per_step: bool
    depformer_pos_emb: str
    depformer_max_period: float
    depformer_layer_scale: float | None
    delays: tuple[int, ...]
    text_padding_id: int

    @property
    def num_codebooks(self) -> int:
        return self.n_q + 1

    @property
    def text_initial_id(self) -> int:
        return self.text_card

    @property
    def audio_initial_id(self) -> int:
        return self.card

    def initial_column(self) -> list[int]:
        """moshi's initial tokens: the text card in row 0, the audio card elsewhere."""
        return [self.text_initial_id] + [self.audio_initial_id] * self.n_q

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> LmShape:
        """From moshi's LM kwargs (config.json less its file names, or architectures.py)."""
        unsupported = {
            "demux_second_text_stream": False, "text_card_out": None, "norm_emb": False,
            "bias_proj": False, "depformer_low_rank_embeddings": None,
            "depformer_weights_per_step_schedule": None, "depformer_norm": None,
            "kv_repeat": 1, "cross_attention": False, "extra_heads_num_heads": 0,
            "conditioners": None, "fuser": None,
        }
        for key, default in unsupported.items():
            value = config.get(key)
            if value not in (None, {}, [], default):
                raise UnsupportedArchitectureError(f"the MLX LM does not implement {key}={value!r}")
        gating = config.get("gating", "none")
        for key, value in (("gating", gating),
                           ("depformer_gating", config.get("depformer_gating", gating))):
            if value != "silu":
                raise UnsupportedArchitectureError(
                    f"the MLX LM implements silu gating only, not {key}={value!r}")
        norm = config.get("norm", "layer_norm")
        if norm not in _NORM_EPS:
            raise UnsupportedArchitectureError(f"the MLX LM does not implement norm={norm!r}")
        if config.get("context") is None:
            raise UnsupportedArchitectureError("a streaming LM needs a context")
        positional = config.get("positional_embedding", "sin")
        depformer_positional = config.get("depformer_pos_emb", "sin")
        for key, value in (("positional_embedding", positional),
                           ("depformer_pos_emb", depformer_positional)):
            if value not in ("rope", "none"):
                raise UnsupportedArchitectureError(f"the MLX LM does not implement {key}="
                                                   f"{value!r}")
        dim = int(config["dim"])
        hidden_scale = float(config.get("hidden_scale", 4))
        depformer_dim = int(config.get("depformer_dim", 256))
        depformer_ff = config.get("depformer_dim_feedforward")
        if isinstance(depformer_ff, list):
            raise UnsupportedArchitectureError("a depformer feed-forward size per step")
        n_q = int(config.get("n_q", 8))
        delays = tuple(int(d) for d in config.get("delays", [0]))
        if len(delays) != n_q + 1:
            raise UnsupportedArchitectureError(f"{len(delays)} delays for {n_q + 1} streams")
        return cls(
            dim=dim,
            text_card=int(config.get("text_card", 32000)),
            n_q=n_q,
            dep_q=int(config.get("dep_q", 8)),
            card=int(config.get("card", 1024)),
            num_heads=int(config.get("num_heads", 8)),
            num_layers=int(config["num_layers"]),
            dim_feedforward=int(hidden_scale * dim),
            context=int(config["context"]),
            max_period=float(config.get("max_period", 10000)),
            norm=norm,
            positional_embedding=positional,
            layer_scale=config.get("layer_scale"),
            depformer_dim=depformer_dim,
            depformer_dim_feedforward=int(depformer_ff if depformer_ff is not None
                                          else hidden_scale * depformer_dim),
            depformer_num_heads=int(config.get("depformer_num_heads", 8)),
            depformer_num_layers=int(config.get("depformer_num_layers", 1)),
            depformer_multi_linear=bool(config.get("depformer_multi_linear", False)),
            depformer_weights_per_step=bool(config.get("depformer_weights_per_step", False)),
            depformer_pos_emb=depformer_positional,
            depformer_max_period=float(config.get("depformer_max_period",
                                                  config.get("max_period", 10000))),
            depformer_layer_scale=config.get("depformer_layer_scale", config.get("layer_scale")),
            delays=delays,
            text_padding_id=int(config.get("existing_text_padding_id", 3)),
        )


# ---- building blocks -------------------------------------------------------------------


class Embedding(nn.Module):
    """moshi's ScaledEmbedding: a lookup where the zero token (-1) gives exact zeros."""

    def __init__(self, count: int, dim: int) -> None:
        super().__init__()
        self.weight = mx.zeros((count, dim))

    def __call__(self, ids: mx.array) -> mx.array:
        rows = self.weight[mx.maximum(ids, 0)]
        return mx.where((ids == ZERO_TOKEN)[..., None], mx.zeros((1,), rows.dtype), rows)


class RmsNorm(nn.Module):
    """moshi's RMSNorm (computed in float32 for rms_norm_f32; its alpha is [1, 1, dim])."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.alpha = mx.ones((1, 1, dim))
        self.eps = eps

    def __call__(self, x: mx.array) -> mx.array:
        x32 = x.astype(mx.float32)
        var = self.eps + mx.mean(x32 * x32, axis=-1, keepdims=True)
        return (x32 * (self.alpha.astype(mx.float32) * mx.rsqrt(var))).astype(x.dtype)


class LayerScale(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.scale = mx.ones((dim,))

    def __call__(self, x: mx.array) -> mx.array:
        return self.scale * x


class Gating(nn.Module):
    """moshi's ActivationGating with silu: its hidden size rule, gate and value halves."""

    def __init__(self, dim: int, dim_feedforward: int) -> None:
        super().__init__()
        hidden = (21 * dim) // 8 if dim_feedforward == 4 * dim else (2 * dim_feedforward) // 3
        self.linear_in = nn.Linear(dim, 2 * hidden, bias=False)
        self.linear_out = nn.Linear(hidden, dim, bias=False)

    def __call__(self, x: mx.array) -> mx.array:
        batch, steps, _ = x.shape
        x = self.linear_in(x).reshape(batch, steps, 2, -1)
        return self.linear_out(nn.silu(x[:, :, 0]) * x[:, :, 1])


def apply_rope(x: mx.array, offset: int, max_period: float) -> mx.array:
    """Interleaved rotary embedding of x [B, H, T, D] at positions offset..offset+T-1, in
    float32 with moshi's own frequency formula (so large positions round alike)."""
    dim = x.shape[-1]
    freqs = mx.exp(mx.arange(dim // 2, dtype=mx.float32) * (-math.log(max_period) * 2 / dim))
    times = offset + mx.arange(x.shape[2], dtype=mx.float32)
    angles = times[:, None] * freqs[None, :]  # [T, D/2]
    cos, sin = mx.cos(angles), mx.sin(angles)
    pairs = x.reshape(*x.shape[:-1], dim // 2, 2).astype(mx.float32)
    real, imag = pairs[..., 0], pairs[..., 1]
    rotated = mx.stack([real * cos - imag * sin, real * sin + imag * cos], axis=-1)
    return rotated.reshape(x.shape).astype(x.dtype)


class Attention(nn.Module):
    """Self-attention with one projection per depformer step (`mult` of them) or one."""

    def __init__(self, dim: int, num_heads: int, mult: int) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.in_projs = [nn.Linear(dim, 3 * dim, bias=False) for _ in range(mult)]
        self.out_projs = [nn.Linear(dim, dim, bias=False) for _ in range(mult)]

    def project(self, x: mx.array, step: int) -> tuple[mx.array, mx.array, mx.array]:
        batch, steps, _ = x.shape
        qkv = self.in_projs[step](x).reshape(batch, steps, 3, self.num_heads, -1)
        qkv = qkv.transpose(2, 0, 3, 1, 4)  # [3, B, H, T, D]
        return qkv[0], qkv[1], qkv[2]

    def output(self, x: mx.array, step: int) -> mx.array:
        batch, _, steps, _ = x.shape
        return self.out_projs[step](x.transpose(0, 2, 1, 3).reshape(batch, steps, -1))


def _attend(q: mx.array, k: mx.array, v: mx.array, mask: mx.array | None) -> mx.array:
    return mx.fast.scaled_dot_product_attention(q, k, v, scale=q.shape[-1] ** -0.5, mask=mask)


class TransformerLayer(nn.Module):
    def __init__(self, dim: int, num_heads: int, dim_feedforward: int, norm: str,
                 layer_scale: float | None, steps: int) -> None:
        """`steps`: the depformer's weights per step (its gating and projections), else 1."""
        super().__init__()
        self.self_attn = Attention(dim, num_heads, steps)
        self.norm1 = RmsNorm(dim, _NORM_EPS[norm])
        self.norm2 = RmsNorm(dim, _NORM_EPS[norm])
        self.gating: Gating | list[Gating] = (
            [Gating(dim, dim_feedforward) for _ in range(steps)] if steps > 1
            else Gating(dim, dim_feedforward))
        if layer_scale is not None:
            self.layer_scale_1 = LayerScale(dim)
            self.layer_scale_2 = LayerScale(dim)
        self.scaled = layer_scale is not None

    def _gate(self, x: mx.array, step: int) -> mx.array:
        gating = self.gating[step] if isinstance(self.gating, list) else self.gating
        return gating(x)

    def _residuals(self, x: mx.array, attended: mx.array, step: int) -> mx.array:
        x = x + (self.layer_scale_1(attended) if self.scaled else attended)
        update = self._gate(self.norm2(x), step)
        return x + (self.layer_scale_2(update) if self.scaled else update)

    def temporal(self, x: mx.array, ring: KVRing, offset: int, rope_period: float | None,
                 shared_mask: SharedMask | None = None) -> mx.array:
        q, k, v = self.self_attn.project(self.norm1(x), 0)
        if rope_period is not None:
            q, k = apply_rope(q, offset, rope_period), apply_rope(k, offset, rope_period)
        keys, values, mask = ring.update(k, v, shared_mask)
        return self._residuals(x, self.self_attn.output(_attend(q, keys, values, mask), 0), 0)

    def depth(self, x: mx.array, past: list[tuple[mx.array, mx.array]], step: int,
              weights: int, rope_period: float | None) -> mx.array:
        """Depformer step `step` (with the weights of step `weights`): it sees this frame's
        earlier steps, kept in `past`."""
        q, k, v = self.self_attn.project(self.norm1(x), weights)
        if rope_period is not None:
            q, k = apply_rope(q, step, rope_period), apply_rope(k, step, rope_period)
        past.append((k, v))
        keys = mx.concatenate([p[0] for p in past], axis=2)
        values = mx.concatenate([p[1] for p in past], axis=2)
        attended = self.self_attn.output(_attend(q, keys, values, None), weights)
        return self._residuals(x, attended, weights)


class Transformer(nn.Module):
    def __init__(self, layers: list[TransformerLayer]) -> None:
        super().__init__()
        self.layers = layers


# ---- streaming state ---------------------------------------------------------------------


class TemporalStream:
    """The temporal transformer's streaming state: one KV ring per layer and the offset
    (the next position's index, for RoPE)."""

    def __init__(self, num_layers: int, context: int, capacity: int) -> None:
        self.rings = [KVRing(context, capacity) for _ in range(num_layers)]
        self.offset = 0

    def arrays(self) -> list[mx.array]:
        return [a for ring in self.rings for a in ring.arrays()]


class DepformerStream:
    """One frame's depformer state: the keys and values of its steps so far, per layer."""

    def __init__(self, num_layers: int) -> None:
        self.past: list[list[tuple[mx.array, mx.array]]] = [[] for _ in range(num_layers)]
        self.step = 0


# ---- the model ---------------------------------------------------------------------------


class MlxLm(nn.Module):
    def __init__(self, shape: LmShape) -> None:
        super().__init__()
        self.shape = shape
        s = shape
        self.emb = [Embedding(s.card + 1, s.dim) for _ in range(s.n_q)]
        self.text_emb = Embedding(s.text_card + 1, s.dim)
        self.text_linear = nn.Linear(s.dim, s.text_card, bias=False)
        self.transformer = Transformer([
            TransformerLayer(s.dim, s.num_heads, s.dim_feedforward, s.norm, s.layer_scale, 1)
            for _ in range(s.num_layers)])
        self.out_norm = RmsNorm(s.dim, _NORM_EPS[s.norm])
        self.depformer_in = [nn.Linear(s.dim, s.depformer_dim, bias=False)
                             for _ in range(s.dep_q if s.depformer_multi_linear else 1)]
        self.depformer_emb = [Embedding(s.card + 1, s.depformer_dim) for _ in range(s.dep_q - 1)]
        self.depformer_text_emb = Embedding(s.text_card + 1, s.depformer_dim)
        steps = s.dep_q if s.depformer_weights_per_step else 1
        self.depformer = Transformer([
            TransformerLayer(s.depformer_dim, s.depformer_num_heads, s.depformer_dim_feedforward,
                             s.norm, s.depformer_layer_scale, steps)
            for _ in range(s.depformer_num_layers)])
        self.linears = [nn.Linear(s.depformer_dim, s.card, bias=False) for _ in range(s.dep_q)]

    def new_stream(self, max_chunk: int = 1) -> TemporalStream:
        """A fresh streaming state whose rings hold a forward of up to `max_chunk` positions
        exactly (context + max_chunk - 1 slots, as the torch engine widens its rings)."""
        s = self.shape
        return TemporalStream(s.num_layers, s.context, s.context + max(1, max_chunk) - 1)

    def forward_text(self, codes: mx.array, stream: TemporalStream
                     ) -> tuple[mx.array, mx.array]:
        """codes [B, 17, T] -> (transformer output [B, T, dim], text logits [B, T, text_card]).
        T positions in one call, causal among themselves; the stream advances by T."""
        s = self.shape
        x = self.emb[0](codes[:, 1])
        for index in range(1, s.n_q):
            x = x + self.emb[index](codes[:, index + 1])
        x = x + self.text_emb(codes[:, 0])
        rope = s.max_period if s.positional_embedding == "rope" else None
        shared = SharedMask()  # the rings are in step: one mask for every layer
        for layer, ring in zip(self.transformer.layers, stream.rings, strict=True):
            x = layer.temporal(x, ring, stream.offset, rope, shared)
        stream.offset += codes.shape[-1]
        out = self.out_norm(x)
        return out, self.text_linear(out)

    def forward_depformer(self, previous: mx.array, transformer_out: mx.array,
                          stream: DepformerStream) -> mx.array:
        """The next depformer step: previous token [B] (the text for step 0, else the
        previous codebook's code), transformer output [B, 1, dim] -> logits [B, card]."""
        s = self.shape
        step = stream.step
        if step >= s.dep_q:
            raise RuntimeError(f"the depformer has only {s.dep_q} steps")
        x = self.depformer_in[step if s.depformer_multi_linear else 0](transformer_out)
        embedding = self.depformer_text_emb if step == 0 else self.depformer_emb[step - 1]
        x = x + embedding(previous[:, None])
        rope = s.depformer_max_period if s.depformer_pos_emb == "rope" else None
        weights = step if s.depformer_weights_per_step else 0
        for layer, past in zip(self.depformer.layers, stream.past, strict=True):
            x = layer.depth(x, past, step, weights, rope)
        stream.step += 1
        return self.linears[step](x)[:, 0]

    def new_depformer_stream(self) -> DepformerStream:
        return DepformerStream(self.shape.depformer_num_layers)
