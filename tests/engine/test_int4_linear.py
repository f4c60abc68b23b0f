"""4-bit weights with the product fused (app/engine/int4_linear.py), on this CPU through torch's
CPU int4 kernel: the product is the dequantized weight's product, every shape the 7B and
tiny-cs have goes through (padded where the kernels want it), the KV rings keep the model's
dtype, and tiny-cs at int4, loaded as the app loads it, follows float32 within the bound
measured here and converses with a span."""

from __future__ import annotations

import pytest
import torch

from app.checkpoints.catalog import get_manifest
from app.checkpoints.loader import load_checkpoint
from app.conversation.assembly import load_speech_model
from app.conversation.config import ConversationConfig
from app.engine import events as ev
from app.engine.int4_linear import (
    INT4_GROUP_SIZES,
    Int4Linear,
    dequantize_int4,
    int4_unavailable_reason,
    quantize_int4,
)
from app.moshi_internals import kv_rings
from tests.engine.span_conversation import converse_with_a_span
from tests.engine.test_quantize import logit_agreement


def _linear(out_features: int, in_features: int, seed: int = 0) -> torch.nn.Linear:
    generator = torch.Generator().manual_seed(seed)
    layer = torch.nn.Linear(in_features, out_features, bias=False)
    with torch.no_grad():
        layer.weight.copy_(torch.randn(out_features, in_features, generator=generator)
                           / in_features**0.5)
    return layer


def test_codes_stand_for_each_weight_within_half_a_step_of_its_group():
    weight = _linear(48, 256).weight.detach()
    for group in INT4_GROUP_SIZES:
        codes, scales, zeros = quantize_int4(weight, group)
        assert codes.dtype == torch.uint8 and int(codes.max()) <= 15
        error = (dequantize_int4(codes, scales, zeros) - weight).abs()
        step = scales.repeat_interleave(group, dim=1)  # each weight's group's step
        assert bool((error <= step / 2 + 1e-6).all()), group


# [out, in]: the 7B's shapes scaled down, and tiny-cs's (in not whole groups, out not a
# multiple of 16: both padded)
@pytest.mark.parametrize("shape", [(96, 256), (352, 176), (100, 88), (2048, 1024)])
@pytest.mark.parametrize("group", INT4_GROUP_SIZES)
def test_the_fused_product_is_the_dequantized_weights_product(shape, group):
    out_features, in_features = shape
    linear = _linear(out_features, in_features)
    layer = Int4Linear(linear, group_size=group)
    x = torch.randn(2, 3, in_features, generator=torch.Generator().manual_seed(1))
    padded = -(-in_features // group) * group
    weight = torch.zeros(out_features, padded)
    weight[:, :in_features] = linear.weight.detach()
    codes, scales, zeros = quantize_int4(weight, group)
    expected = x @ dequantize_int4(codes, scales, zeros)[:, :in_features].t()
    with torch.no_grad():
        got = layer(x)
    assert got.shape == (2, 3, out_features) and got.dtype == torch.float32
    # float32 accumulation in another order: equal to rounding
    assert torch.allclose(got, expected, rtol=1e-4, atol=1e-4 * float(expected.abs().max()))
    # and the quantization error itself is what 4 bits give, not more
    reference = x @ linear.weight.detach().t()
    relative = float((got - reference).norm() / reference.norm())
    assert relative < 0.15, relative


def test_the_int4_kernel_runs_here_and_what_does_not_run_says_why():
    assert int4_unavailable_reason(torch.device("cpu")) is None
    assert "MLX" in (int4_unavailable_reason(torch.device("mps")) or "")


def test_tiny_cs_at_int4_loads_as_the_app_loads_it_and_follows_float32(tiny_cs_folder):
    reference = load_checkpoint(get_manifest("tiny-cs"), tiny_cs_folder).lm
    checkpoint = load_speech_model(ConversationConfig(model_id="tiny-cs", device="cpu",
                                                      precision="int4"))
    lm = checkpoint.lm
    assert not [m for m in lm.modules() if isinstance(m, torch.nn.Linear)]
    assert sum(isinstance(m, Int4Linear) for m in lm.modules()) > 0
    with lm.streaming(1):  # moshi would make these float16 for a QLinear
        rings = kv_rings(lm)
        assert rings and all(r.cache.dtype == torch.float32 for r in rings)
    agreement = logit_agreement(reference, lm, steps=256)
    print(f"int4 (groups of 128) against float32, tiny-cs, teacher-forced: {agreement}")
    # Measured here: text 0.66, audio 0.74 greedy agreement, relative logit error 0.21
    # (fp8: 0.83, 0.88, 0.08). Random weights' logits are nearly flat, so a small error flips
    # many argmaxes; a wrong scale, zero or group size falls to chance (about 0.0 and 0.1).
    assert agreement["text"] >= 0.6 and agreement["audio"] >= 0.68, agreement
    assert agreement["text_relative_error"] <= 0.25, agreement


def test_the_engine_converses_and_takes_a_span_block_with_int4_weights(tiny_cs_folder):
    checkpoint = load_speech_model(ConversationConfig(model_id="tiny-cs", device="cpu",
                                                      precision="int4"))
    _, events = converse_with_a_span(checkpoint, 20)
    ready = next(e for e in events if isinstance(e, ev.EngineReady))
    assert ready.dtype == "int4"  # what runs, as the layers say
