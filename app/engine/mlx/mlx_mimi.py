"""Mimi on MLX: the audio codec of the MLX engine, on the Mac's GPU instead of torch's CPU.

moshi_mlx's Mimi (its modules, used as a library: `pip install moshi_mlx --no-deps`) with
the weights file the torch loader reads, and the torch Mimi's streaming semantics, frame by
frame, so that the codes the LM hears are the torch engine's:
- the SEANet convolutions, the 12.5 Hz down/upsampling and the quantizer are moshi_mlx's
  streaming modules (`.step`);
- the two transformers run here, layer by layer over moshi_mlx's own layers: its
  `Mimi.encode_step` gives a frame's two 25 Hz positions to attention with no mask (each
  sees the other: the first one hears the future) and a key cache that grows for the whole
  conversation, while torch's keeps a ring of `context` positions and masks each query to
  its own past within it (`MimiRing` below, moshi's `RingKVCache` positions and mask);
- the feed-forward uses the exact GELU torch Mimi was trained with (moshi_mlx's layer
  calls the tanh approximation).
rustymimi was not used: it only loads the full-size Mimi (no config), so the tiny
checkpoints' Mimi (tiny_builder) could not run on it and no test here could compare it.

This module imports mlx and moshi_mlx: import it only where they are installed.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import numpy.typing as npt
from moshi_mlx.models.mimi import Mimi, MimiConfig
from moshi_mlx.modules import SeanetConfig, TransformerConfig
from moshi_mlx.modules.transformer import ProjectedTransformer
from safetensors import safe_open

from app.frames import FRAME_SAMPLES

if TYPE_CHECKING:
    from moshi.models import MimiModel


class MimiConfigError(ValueError):
    """A Mimi (its config or its weights file) that the MLX Mimi does not run: the message
    says what, and that the torch Mimi (`--mimi torch`) runs it."""


# The torch config's values the MLX modules have no switch for: each must be as written.
_FIXED_SEANET = {"activation": "ELU", "norm": "none", "channels": 1}
_FIXED_TRANSFORMER = {"causal": True, "gating": "none", "norm": "layer_norm",
                      "positional_embedding": "rope", "conv_layout": True}


def _require(section: str, config: dict[str, Any], fixed: dict[str, Any]) -> None:
    for key, wanted in fixed.items():
        if key in config and config[key] != wanted:
            raise MimiConfigError(f"Mimi's {section} {key} is {config[key]!r}: the MLX Mimi "
                                  f"runs {wanted!r} only (choose --mimi torch)")


def mlx_mimi_config(torch_config: dict[str, Any]) -> MimiConfig:
    """moshi_mlx's config for the Mimi that moshi's `get_mimi(config)` builds in torch, with
    every codebook the weights file holds (the strict load checks them all)."""
    seanet, quant, tr = (torch_config["seanet"], torch_config["quantizer"],
                         torch_config["transformer"])
    _require("seanet", seanet, _FIXED_SEANET)
    _require("transformer", tr, _FIXED_TRANSFORMER)
    dim = seanet["dimension"]
    if quant.get("input_dimension", dim) != dim or quant.get("output_dimension", dim) != dim:
        raise MimiConfigError("Mimi's quantizer projects to a width other than SEANet's: "
                              "the MLX Mimi does not (choose --mimi torch)")
    if quant.get("n_q_semantic", 1) != 1:
        raise MimiConfigError("Mimi with more than one semantic codebook: the MLX Mimi "
                              "has one (choose --mimi torch)")
    if list(tr.get("output_dimensions", [dim])) != [dim] or tr.get("input_dimension",
                                                                    dim) != dim:
        raise MimiConfigError("Mimi's transformers project: the MLX Mimi's do not "
                              "(choose --mimi torch)")
    return MimiConfig(
        channels=torch_config["channels"],
        sample_rate=torch_config["sample_rate"],
        frame_rate=torch_config["frame_rate"],
        renormalize=True,
        seanet=SeanetConfig(
            dimension=dim, channels=seanet["channels"], causal=seanet["causal"],
            nfilters=seanet["n_filters"], nresidual_layers=seanet["n_residual_layers"],
            ratios=list(seanet["ratios"]), ksize=seanet["kernel_size"],
            residual_ksize=seanet["residual_kernel_size"],
            last_ksize=seanet["last_kernel_size"], dilation_base=seanet["dilation_base"],
            pad_mode=seanet["pad_mode"], true_skip=seanet["true_skip"],
            compress=seanet["compress"]),
        transformer=TransformerConfig(
            d_model=tr["d_model"], num_heads=tr["num_heads"], num_layers=tr["num_layers"],
            causal=True, norm_first=True, bias_ff=False, bias_attn=False,
            layer_scale=tr.get("layer_scale"), positional_embedding="rope",
            use_conv_block=False, cross_attention=False, conv_kernel_size=3,
            use_conv_bias=True, gating=False, norm="layer_norm", context=tr["context"],
            max_period=tr["max_period"], max_seq_len=tr["context"], kv_repeat=1,
            dim_feedforward=tr["dim_feedforward"], conv_layout=True),
        quantizer_nq=quant["n_q"],
        quantizer_bins=quant["bins"],
        quantizer_dim=quant["dimension"],
    )


class MimiRing:
    """One attention layer's keys and values for the last `capacity` positions, as
    moshi's RingKVCache holds them: a call's positions are all written before its queries
    attend, and each query sees the positions `0 <= query - key < capacity` still held.

    Duck-types the cache moshi_mlx's Attention takes (`offset`, `update_and_fetch`)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.offset = 0  # the absolute position of the next key (RoPE reads it first)
        self._keys: mx.array | None = None  # [B, H, capacity, D]
        self._values: mx.array | None = None
        self._held = np.full(capacity, -1, dtype=np.int64)  # the position in each slot

    def reset(self) -> None:
        self.offset = 0
        self._keys = self._values = None
        self._held.fill(-1)

    def mask_for(self, count: int) -> mx.array:
        """The boolean mask [count, filled slots] for the next `count` positions."""
        held = self._held.copy()
        for position in range(self.offset, self.offset + count):
            held[position % self.capacity] = position
        filled = min(self.offset + count, self.capacity)
        queries = np.arange(self.offset, self.offset + count)[:, None]
        delta = queries - held[None, :filled]
        return mx.array((held[None, :filled] >= 0) & (delta >= 0) & (delta < self.capacity))

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        batch, heads, count, dim = keys.shape
        if count > self.capacity:
            raise ValueError(f"{count} positions at once exceed Mimi's ring of "
                             f"{self.capacity}")
        if self._keys is None or self._values is None:
            self._keys = mx.zeros((batch, heads, self.capacity, dim), keys.dtype)
            self._values = mx.zeros((batch, heads, self.capacity, dim), values.dtype)
        for i in range(count):
            slot = (self.offset + i) % self.capacity
            self._keys[:, :, slot : slot + 1] = keys[:, :, i : i + 1]
            self._values[:, :, slot : slot + 1] = values[:, :, i : i + 1]
            self._held[slot] = self.offset + i
        self.offset += count
        filled = min(self.offset, self.capacity)
        return self._keys[:, :, :filled], self._values[:, :, :filled]


def _streamed_transformer(projected: ProjectedTransformer, rings: list[MimiRing],
                          xs: mx.array) -> mx.array:
    """[B, C, T] through one Mimi transformer (pre-norm layers, no projections: Mimi's),
    its attention on `rings` under torch's mask."""
    x = xs.swapaxes(1, 2)  # conv layout -> [B, T, C]
    mask = rings[0].mask_for(x.shape[1])  # every layer's ring holds the same positions
    for layer, ring in zip(projected.transformer.layers, rings, strict=True):
        attended = layer.self_attn(layer.norm1(x), cache=cast(Any, ring), mask=mask)  # duck
        x = x + layer.layer_scale_1(attended)
        feed_forward = layer.gating  # MlpNoGating: linear1, GELU, linear2
        update = feed_forward.linear2(nn.gelu(feed_forward.linear1(layer.norm2(x))))
        x = x + layer.layer_scale_2(update)
    return x.swapaxes(1, 2)


# moshi >= 0.2 saves attention weights as `in_projs.0.weight`/`out_projs.0.weight`; the
# released Mimi files (and moshi_mlx's loader) name them as torch's MultiheadAttention did.
_SAVED_ATTENTION_NAMES = {".self_attn.in_projs.0.weight": ".self_attn.in_proj_weight",
                          ".self_attn.out_projs.0.weight": ".self_attn.out_proj.weight"}


@contextmanager
def _released_key_names(weights: Path) -> Iterator[Path]:
    """`weights` itself when its keys are the released files' names; else a renamed copy
    in a temporary folder (a Mimi saved by moshi 0.2's state_dict, like the tiny ones)."""
    with safe_open(str(weights), "numpy") as header:  # the names only: no tensor is read
        names = header.keys()
    saved_names = any(key.endswith(tuple(_SAVED_ATTENTION_NAMES)) for key in names)
    if not saved_names:
        yield weights
        return
    tensors = mx.load(str(weights))
    assert isinstance(tensors, dict)
    renamed = {}
    for key, value in tensors.items():
        for new, old in _SAVED_ATTENTION_NAMES.items():
            if key.endswith(new):
                key = key.removesuffix(new) + old
        renamed[key] = value
    with tempfile.TemporaryDirectory(prefix="contextspan-mimi-") as folder:
        copy = Path(folder) / weights.name
        mx.save_safetensors(str(copy), renamed)
        yield copy


class MlxMimi:
    """A streaming Mimi: one 80 ms frame of PCM in, its codes out; codes in, a frame out."""

    def __init__(self, model: Mimi, num_codebooks: int, context: int) -> None:
        self.model = model
        self.num_codebooks = num_codebooks
        layers = model.cfg.transformer.num_layers
        self._encoder_rings = [MimiRing(context) for _ in range(layers)]
        self._decoder_rings = [MimiRing(context) for _ in range(layers)]

    @classmethod
    def load(cls, weights: Path, torch_config: dict[str, Any], num_codebooks: int
             ) -> MlxMimi:
        """From the same weights file and config the torch loader reads (float32)."""
        if Path(weights).suffix not in (".safetensors", ".sft", ".sfts"):
            raise MimiConfigError(f"{Path(weights).name}: the MLX Mimi reads safetensors "
                                  "weights only (choose --mimi torch)")
        config = mlx_mimi_config(torch_config)
        if not 1 <= num_codebooks <= config.quantizer_nq:
            raise MimiConfigError(f"{num_codebooks} codebooks asked of a Mimi that has "
                                  f"{config.quantizer_nq}")
        model = Mimi(config)
        try:
            with _released_key_names(Path(weights)) as readable:
                model.load_pytorch_weights(str(readable), strict=True)
                model.set_dtype(mx.float32)  # as torch's get_mimi holds it, whatever the file
                mx.eval(model.parameters())  # read now: a renamed copy is deleted after
        except ValueError as exc:
            raise MimiConfigError(f"{Path(weights).name} does not load into the MLX Mimi "
                                  f"its config describes: {exc}") from exc
        # Encode only the codebooks the LM reads, as torch's set_num_codebooks does.
        rest = model.quantizer.rvq_rest.vq
        rest.layers = rest.layers[: num_codebooks - 1]
        return cls(model, num_codebooks, int(torch_config["transformer"]["context"]))

    @classmethod
    def from_torch(cls, mimi: MimiModel, torch_config: dict[str, Any]) -> MlxMimi:
        """The same weights as a torch Mimi that has no file (a random-weight checkpoint's),
        through the same loading path: its state saved, then read as a file is."""
        from safetensors.torch import save_file

        state = {key: value.detach().cpu().contiguous()
                 for key, value in mimi.state_dict().items()}
        with tempfile.TemporaryDirectory(prefix="contextspan-mimi-") as folder:
            path = Path(folder) / "mimi.safetensors"
            save_file(state, str(path))
            return cls.load(path, torch_config, mimi.num_codebooks)

    def reset(self) -> None:
        """Forget the stream (torch's reset_streaming): the next frame is a first frame."""
        self.model.reset_all()
        for ring in (*self._encoder_rings, *self._decoder_rings):
            ring.reset()

    def encode_frame(self, pcm: npt.NDArray[np.float32]) -> npt.NDArray[np.int64]:
        """[1920] float32 PCM -> its [num_codebooks] codes (int64)."""
        if pcm.shape != (FRAME_SAMPLES,):
            raise ValueError(f"a frame is {FRAME_SAMPLES} samples, got shape {pcm.shape}")
        model = self.model
        x = model.encoder.step(mx.array(pcm, dtype=mx.float32)[None, None])  # [1, C, 2]
        x = _streamed_transformer(model.encoder_transformer, self._encoder_rings, x)
        x = model.downsample.step(x)  # [1, C, 1]
        codes = model.quantizer.encode(x)  # [1, K, 1]
        return np.asarray(codes[0, :, 0], dtype=np.int64)

    def decode_frame(self, codes: npt.NDArray[np.int64]) -> npt.NDArray[np.float32]:
        """[num_codebooks] codes -> [1920] float32 PCM."""
        model = self.model
        x = model.quantizer.decode(mx.array(np.asarray(codes, dtype=np.int32))[None, :, None])
        x = model.upsample.step(x)  # [1, C, 2]
        x = _streamed_transformer(model.decoder_transformer, self._decoder_rings, x)
        pcm = model.decoder.step(x)  # [1, 1, 1920]
        return np.asarray(pcm[0, 0], dtype=np.float32)

