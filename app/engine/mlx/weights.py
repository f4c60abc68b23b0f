"""The MLX LM from the files the torch loader reads, converted strictly.

The same files, found the same way (loader.checkpoint_info): a config.json checkpoint's
safetensors, or a release of bare weights (PersonaPlex's safetensors, the Context Spanning
`.pt` pickle with torch.compile's `._orig_mod.` in its keys, read by release_weights.py).
The PersonaPlex fork stores each attention's projections as one matrix, the steps stacked;
they are split per step as moshi's own load hook does. Every MLX parameter must come from
the file and every tensor of the file must land in one: a mismatch is an error naming the
keys, never a random weight. Weights can be quantized at load (8 or 4 bits).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import torch
from mlx.utils import tree_flatten, tree_unflatten

from app.checkpoints.catalog import Manifest
from app.checkpoints.loader import checkpoint_info
from app.checkpoints.release_weights import read_state_dict
from app.checkpoints.tiny_builder import RANDOM_WEIGHTS_MARKER
from app.engine.mlx.lm import LmShape, MlxLm
from app.moshi_internals import moshi_7b_config

_STACKED = re.compile(
    r"^(?P<prefix>(?P<module>transformer|depformer)\.layers\.\d+\.self_attn)\."
    r"(?P<kind>in_proj_weight|in_proj\.weight|out_proj\.weight)$")
QUANTIZE_BITS = (8, 4)


class MlxWeightsError(ValueError):
    """The file does not convert to this MLX LM (the message names the keys)."""


def _summary(keys: list[str]) -> str:
    shown = ", ".join(sorted(keys)[:4])
    return f"{len(keys)} ({shown}{', ...' if len(keys) > 4 else ''})"


def split_stacked_projections(state: Mapping[str, torch.Tensor], shape: LmShape
                              ) -> dict[str, torch.Tensor]:
    """The fork's one-matrix projections as one per step (moshi's own load-hook rule)."""
    out: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        match = _STACKED.match(key)
        if match is None:
            out[key] = value
            continue
        steps = (shape.dep_q if match["module"] == "depformer"
                 and shape.depformer_weights_per_step else 1)
        if value.shape[0] % steps:
            raise MlxWeightsError(f"{key} of shape {tuple(value.shape)} does not split into "
                                  f"{steps} steps")
        name = "in_projs" if match["kind"].startswith("in") else "out_projs"
        for step, piece in enumerate(value.reshape(steps, -1, *value.shape[1:])):
            out[f"{match['prefix']}.{name}.{step}.weight"] = piece
    return out


def load_state(model: MlxLm, state: Mapping[str, torch.Tensor], dtype: mx.Dtype,
               source: str) -> None:
    """Set every parameter of `model` from `state` (torch names), strictly."""
    state = split_stacked_projections(state, model.shape)
    wanted = dict(tree_flatten(model.parameters()))
    missing = sorted(set(wanted) - set(state))
    unexpected = sorted(set(state) - set(wanted))
    if missing or unexpected:
        problems = []
        if missing:
            problems.append(f"missing {_summary(missing)}")
        if unexpected:
            problems.append(f"unexpected {_summary(unexpected)}")
        raise MlxWeightsError(f"{source} does not match the architecture: {'; '.join(problems)}")
    converted = []
    for key, target in wanted.items():
        value = state[key]
        if tuple(value.shape) != tuple(target.shape):
            raise MlxWeightsError(f"{source}: {key} has shape {tuple(value.shape)}, the "
                                  f"architecture wants {tuple(target.shape)}")
        array = value.detach().to(torch.float32).numpy()
        # Norms stay float32 (moshi's rms_norm_f32 computes in float32 anyway).
        converted.append((key, mx.array(array, dtype=mx.float32 if key.endswith(".alpha")
                                        else dtype)))
    model.update(tree_unflatten(converted))
    mx.eval(model.parameters())


def quantize(model: MlxLm, bits: int, group_size: int = 64, evaluate: bool = True) -> int:
    """Quantize the LM's linear layers to `bits` (8 or 4) in place, those whose input size
    the group size divides (a tiny depformer's 32 inputs take groups of 32). Embeddings and
    norms stay as they are. Returns the layers quantized.

    `evaluate` False leaves the quantized arrays lazy: the converted-weights cache only needs
    the layers' structure before it loads their stored values (nothing is computed)."""
    if bits not in QUANTIZE_BITS:
        raise ValueError(f"{bits}-bit weights: choose one of {QUANTIZE_BITS}")
    count = 0

    def chosen(_path: str, module: nn.Module) -> bool | dict[str, int]:
        nonlocal count
        if not isinstance(module, nn.Linear):
            return False
        inputs = module.weight.shape[1]
        size = group_size if inputs % group_size == 0 else 32 if inputs % 32 == 0 else 0
        if not size:
            return False
        count += 1
        return {"group_size": size, "bits": bits}

    nn.quantize(model, group_size=group_size, bits=bits, class_predicate=chosen)
    if evaluate:
        mx.eval(model.parameters())
    return count


def lm_config_of(manifest: Manifest, folder: Path) -> tuple[dict[str, Any], Path]:
    """The LM's kwargs and weight file, resolved exactly as the torch loader resolves them."""
    info = checkpoint_info(manifest, folder)
    if info.raw_config and info.raw_config.get(RANDOM_WEIGHTS_MARKER):
        raise MlxWeightsError(f"{manifest.id} has no weight file (random weights drawn by "
                              "torch at load): nothing to convert")
    if info.lora_weights is not None:
        raise MlxWeightsError(f"{manifest.id}: LoRA weights are not converted to MLX")
    config = dict(info.lm_config or moshi_7b_config())  # no config.json: moshi's 7B
    return config, Path(info.moshi_weights)


def load_mlx_lm(manifest: Manifest, folder: Path, dtype: mx.Dtype = mx.float32,
                bits: int | None = None) -> MlxLm:
    """The checkpoint's LM on MLX: built from its config, its weights converted strictly,
    quantized to `bits` when given."""
    config, weights = lm_config_of(manifest, Path(folder))
    model = MlxLm(LmShape.from_config(config))
    load_state(model, read_state_dict(weights), dtype, weights.name)
    if bits is not None:
        quantize(model, bits)
    return model


def parameter_count(model: MlxLm) -> int:
    return int(sum(np.prod(v.shape) for _, v in tree_flatten(model.parameters())))
