"""One moshi transformer layer's modules at one step, as the fused step runs them (the
temporal transformer's in temporal_step.py, each codebook step's depformer layer in
depformer_step.py): its norms, its attention's projections, its layer scales and its gating's
linears, picked out of moshi's StreamingTransformerLayer once so a step reads no module tree."""

from __future__ import annotations

from typing import NamedTuple

import torch
from moshi.modules.gating import ActivationGating
from moshi.modules.transformer import StreamingTransformerLayer


class LayerModules(NamedTuple):
    """What one layer runs at one step (its weights for that step)."""

    norm1: torch.nn.Module
    in_proj: torch.nn.Module
    out_proj: torch.nn.Module
    scale1: torch.nn.Module
    norm2: torch.nn.Module
    gating_in: torch.nn.Module
    gating_out: torch.nn.Module
    scale2: torch.nn.Module


def layer_modules(layer: StreamingTransformerLayer, projection: int = 0,
                  gating: torch.nn.Module | None = None) -> LayerModules:
    """`layer`'s modules with its attention's `projection`-th in/out projections and `gating`
    (default: the layer's own; a layer with weights per step passes the step's)."""
    attention = layer.self_attn
    gating = layer.gating if gating is None else gating
    assert isinstance(gating, ActivationGating)
    assert isinstance(gating.linear_in, torch.nn.Module)
    assert isinstance(gating.linear_out, torch.nn.Module)
    return LayerModules(layer.norm1, attention.in_projs[projection],
                        attention.out_projs[projection], layer.layer_scale_1, layer.norm2,
                        gating.linear_in, gating.linear_out, layer.layer_scale_2)
