"""fp8 products through `torch._scaled_mm` (app/engine/fp8_linear.py), on this CPU: each weight
is its code within half of e4m3's step, none clipped; the product
is exactly the quantized numbers' product with their scales, each batch row is quantized on
its own, this torch's CPU refuses per-row scales so the CPU runs the per-tensor way (the
GPU's arithmetic in two more kernels), and tiny-cs at fp8 follows float32 within the bound
measured here and converses with a span."""

from __future__ import annotations

import pytest
import torch

from app.checkpoints.catalog import get_manifest
from app.checkpoints.loader import load_checkpoint
from app.engine import events as ev
from app.engine.fp8_linear import FP8, FP8_MAX, Fp8Linear, fp8_mode, quantize_fp8_rows
from app.engine.quantize import quantize_linears_fp8
from app.moshi_internals import kv_rings
from tests.engine.span_conversation import converse_with_a_span
from tests.engine.test_quantize import logit_agreement

CPU = torch.device("cpu")


def _linear(out_features: int, in_features: int) -> torch.nn.Linear:
    generator = torch.Generator().manual_seed(0)
    layer = torch.nn.Linear(in_features, out_features, bias=False)
    with torch.no_grad():
        layer.weight.copy_(torch.randn(out_features, in_features, generator=generator)
                           / in_features**0.5)
    return layer


def test_each_weight_is_its_e4m3_code_within_half_a_step():
    """The weight's codes stand for it: each within half of e4m3's step (3 mantissa bits:
    1/16 of its magnitude; below e4m3's smallest normal, half a subnormal step of the row's
    scale), and the row's largest weight is its largest code (448), none clipped."""
    weight = _linear(48, 256).weight.detach() * 7.0
    codes, scale = quantize_fp8_rows(weight)
    back = codes.double() * scale.double()[:, None]
    bound = torch.maximum(weight.double().abs() / 16, scale.double()[:, None] * 2.0**-10)
    assert ((back - weight.double()).abs() <= bound * 1.0001).all()
    assert torch.equal(codes.float().abs().amax(dim=1), torch.full((48,), FP8_MAX))


def _quantized_product(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """The arithmetic the layer stands for, in float64: each input row and each weight row
    as e4m3 with its own scale (largest magnitude / 448), then the product."""
    x = x.reshape(-1, x.shape[-1]).double()
    x_scale = x.abs().amax(dim=1, keepdim=True).clamp(min=1e-12) / FP8_MAX
    x8 = (x / x_scale).to(FP8).double() * x_scale
    w8, w_scale = quantize_fp8_rows(weight)
    return x8 @ (w8.double() * w_scale.double()[:, None]).t()


@pytest.mark.parametrize("shape", [(96, 256), (100, 88), (2048, 1024)])
def test_the_product_is_the_quantized_numbers_product_with_their_scales(shape):
    out_features, in_features = shape
    linear = _linear(out_features, in_features)
    layer = Fp8Linear(linear, "tensorwise")
    assert layer.weight.dtype == FP8
    x = torch.randn(2, 3, in_features, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        got = layer(x)
    assert got.shape == (2, 3, out_features) and got.dtype == torch.float32
    expected = _quantized_product(x, linear.weight.detach()).reshape(2, 3, out_features)
    assert torch.allclose(got.double(), expected, rtol=1e-4,
                          atol=1e-4 * float(expected.abs().max()))
    reference = x @ linear.weight.detach().t()  # and that is e4m3's few percent, not more
    assert float((got - reference).norm() / reference.norm()) < 0.06


def test_each_row_of_a_batch_is_quantized_as_it_would_be_alone():
    layer = Fp8Linear(_linear(64, 128), "tensorwise")
    quiet = 0.01 * torch.randn(1, 1, 128, generator=torch.Generator().manual_seed(2))
    loud = 100.0 * torch.randn(1, 1, 128, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        alone = layer(quiet)
        beside_a_loud_one = layer(torch.cat([quiet, loud]))[:1]
    assert torch.allclose(alone, beside_a_loud_one, rtol=1e-5, atol=1e-9)


def test_this_cpu_runs_fp8_the_per_tensor_way():
    # torch 2.9's CPU _scaled_mm takes per-tensor scales only: the probe finds the way
    # that runs (and gives the right product), and a layer made for rows refuses here.
    assert fp8_mode(CPU) == "tensorwise"
    with pytest.raises(RuntimeError, match="per-tensor"):
        Fp8Linear(_linear(48, 64), "rowwise")(torch.randn(3, 64))


def test_tiny_cs_at_fp8_follows_float32_and_converses(tiny_cs_folder):
    reference = load_checkpoint(get_manifest("tiny-cs"), tiny_cs_folder).lm
    checkpoint = load_checkpoint(get_manifest("tiny-cs"), tiny_cs_folder)
    summary = quantize_linears_fp8(checkpoint.lm)
    lm = checkpoint.lm
    assert summary.layers == sum(isinstance(m, Fp8Linear) for m in lm.modules()) > 0
    assert summary.bytes_after < 0.3 * summary.bytes_before  # float32 -> one byte + scales
    with lm.streaming(1):
        assert all(r.cache.dtype == torch.float32 for r in kv_rings(lm))
    agreement = logit_agreement(reference, lm, steps=256)
    print(f"fp8 (_scaled_mm) against float32, tiny-cs, teacher-forced: {agreement}")
    # Measured here: text 0.83, audio 0.88, relative logit error 0.08 (int8: 0.97, 0.98).
    assert agreement["text"] >= 0.78 and agreement["audio"] >= 0.83, agreement
    assert agreement["text_relative_error"] <= 0.11, agreement

    _, events = converse_with_a_span(checkpoint, 12)
    assert next(e for e in events if isinstance(e, ev.EngineReady)).dtype == "fp8"
