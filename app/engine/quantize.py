"""8-bit weights for the torch engine, through moshi's own bitsandbytes path.

moshi 0.2.13 ships `QLinear` (moshi/utils/quantize.py) and depends on bitsandbytes: every
linear layer's weight becomes int8 with one float32 scale per output row (bitsandbytes'
vector-wise quantization), and the layer computes in float16. moshi's attention reads a
QLinear and keeps its KV cache in float16. Embeddings, norms and Mimi are untouched. On a
7B that takes the linear weights (8.0 of 8.4 billion parameters) from 16 to 8 bits, which is
what lets the model sit on a 12-16 GB card beside the recogniser (app/engine/memory_plan.py).

It runs on this CPU as on CUDA (bitsandbytes 0.49 has CPU kernels for int8), so the tiny
checkpoints test it; tests/engine/test_quantize.py reports its token agreement with float32.
Quantize after the weights are loaded (QLinear quantizes the weight it is given) and before
streaming starts (the KV cache takes its dtype from the layer then).

fp8 (`quantize_linears_fp8`) keeps each weight as float8 e4m3 with one float32 scale per
output row, the same layout at one byte a weight, and computes in float16 as QLinear does
(it is a QLinear to moshi's attention, so the KV cache is float16 as with int8). It is
weight-only: the weight is widened for each product, which saves memory, not time; the
product refuses it where the GPU has no fp8 (fp8_unavailable_reason), and bench gpu
measures what it costs. The CPU runs it too, so the tiny checkpoints test its agreement.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import torch
from moshi.models import LMModel
from moshi.utils.quantize import QLinear

log = logging.getLogger(__name__)


class QuantizationUnavailable(RuntimeError):
    """bitsandbytes is missing or cannot run on this machine."""


@dataclass(frozen=True)
class QuantizedLinears:
    layers: int  # linear layers replaced
    bytes_before: int  # of their weights
    bytes_after: int  # int8 weights and their float32 scales


def int8_unavailable_reason(device: torch.device) -> str | None:
    """None where bitsandbytes' int8 kernels run on `device` (a small layer is quantized and
    run there); else why not, for the user."""
    try:
        layer = QLinear(torch.nn.Linear(64, 64, bias=False)).to(device)
        with torch.no_grad():
            layer(torch.zeros(1, 64, device=device))
    except Exception as exc:  # the library's own words go to the log, not to the user
        log.info("int8 does not run on %s: %s: %s", device, type(exc).__name__, exc)
        return (f"int8 weights need bitsandbytes' int8 kernels, which do not run on "
                f"{device.type} here; choose bf16 or fp32")
    return None


FP8_CAPABILITY = (8, 9)  # Ada; Hopper is 9.0, Blackwell 10.0 and 12.0


def fp8_unavailable_reason(device: torch.device) -> str | None:
    """None on an NVIDIA GPU that has fp8; else why fp8 weights are not offered."""
    wanted = f"{FP8_CAPABILITY[0]}.{FP8_CAPABILITY[1]}"
    if device.type != "cuda":
        return (f"fp8 weights are for NVIDIA GPUs with fp8 (compute capability {wanted} or "
                f"newer: Ada, Hopper, Blackwell), not {device.type}; choose int8 or bf16")
    capability = torch.cuda.get_device_capability(device)
    if capability < FP8_CAPABILITY:
        return (f"{torch.cuda.get_device_name(device)} has compute capability "
                f"{capability[0]}.{capability[1]}: fp8 needs {wanted} or newer; choose int8")
    return None


def _replace_linears(lm: LMModel, make: Callable[[torch.nn.Linear], torch.nn.Module]
                     ) -> QuantizedLinears:
    layers = before = after = 0

    def replace(module: torch.nn.Module) -> None:
        nonlocal layers, before, after
        for name, child in module.named_children():
            if isinstance(child, torch.nn.Linear):
                if child.bias is not None:
                    raise QuantizationUnavailable(f"{name}: 8-bit layers take no bias")
                quantized = make(child)
                setattr(module, name, quantized)
                layers += 1
                before += child.weight.numel() * child.weight.element_size()
                after += sum(p.numel() * p.element_size() for p in quantized.parameters())
            else:
                replace(child)

    with torch.no_grad():
        replace(lm)
    return QuantizedLinears(layers, before, after)


def quantize_linears_int8(lm: LMModel) -> QuantizedLinears:
    """Replace every linear layer of `lm` by moshi's int8 QLinear, in place."""
    try:
        import bitsandbytes  # noqa: F401 - QLinear imports it lazily; fail here, clearly
    except Exception as exc:
        raise QuantizationUnavailable(f"8-bit weights need bitsandbytes ({exc})") from exc
    return _replace_linears(lm, QLinear)


FP8_MAX = 448.0  # the largest float8 e4m3 value


class Fp8Linear(QLinear):
    """float8 e4m3 weights [out, in] with a float32 scale per output row; float16 products,
    as QLinear's (whose type moshi's attention reads to give the KV cache its dtype)."""

    def __init__(self, linear: torch.nn.Linear) -> None:
        torch.nn.Module.__init__(self)  # not QLinear's: it would quantize with bitsandbytes
        weight = linear.weight.detach().float()
        scale = weight.abs().amax(dim=1).clamp(min=1e-12) / FP8_MAX  # [out]
        self.weight: torch.nn.Parameter = torch.nn.Parameter(
            (weight / scale[:, None]).to(torch.float8_e4m3fn), requires_grad=False)
        self.weight_scale = torch.nn.Parameter(scale, requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = (self.weight.float() * self.weight_scale[:, None]).half()  # [out, in]
        return torch.nn.functional.linear(x.half(), weight)


def quantize_linears_fp8(lm: LMModel) -> QuantizedLinears:
    """Replace every linear layer of `lm` by an fp8-weight layer (Fp8Linear), in place."""
    return _replace_linears(lm, Fp8Linear)
