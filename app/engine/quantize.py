"""Quantized weights for the torch engine: every linear layer of the LM replaced, in place.

- int8: moshi's own `QLinear` (moshi/utils/quantize.py, bitsandbytes): int8 weights with one
  float32 scale per output row (vector-wise), float16 products; moshi's attention keeps its KV
  cache in float16 for it. bitsandbytes 0.49 has CPU kernels too, so the tiny checkpoints
  test it. It is kept for the cards the two below leave out: NVIDIA GPUs older than Ampere
  (Turing: T4, RTX 20xx), where neither int4's kernel nor fp8 runs and a 16 GB card holds
  the 7B only at 8 bits; everywhere else int4 (smaller) or fp8 (fused) does better on paper.
- fp8: float8 e4m3 weights and activations, the product in `torch._scaled_mm`
  (app/engine/fp8_linear.py), on NVIDIA GPUs with fp8.
- int4: 4-bit group-quantized weights, the product in torch's int4 kernel
  (app/engine/int4_linear.py), on CUDA GPUs from Ampere on, and on the CPU.
Embeddings, norms and Mimi are untouched: the linear layers hold 7.4 of the 7B's 7.7 billion
parameters (app/plan/memory_plan.py counts them).

int8 quantizes a layer wherever it is and is moved after. fp8 and int4 layers are made on
the device they run on (their layouts are the device's: int4's packing differs between CUDA
and the CPU), so `quantize_linears` takes each float layer to that device, quantizes it
there and drops it: the device never holds more than one 16-bit layer. Quantize after the
weights are loaded and before streaming starts (the KV rings take their dtype then).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import torch
from moshi.models import LMModel
from moshi.modules.transformer import StreamingMultiheadAttention
from moshi.utils.quantize import QLinear

from app.engine.fp8_linear import Fp8Linear, fp8_mode
from app.engine.int4_linear import INT4_GROUP_SIZE, Int4Linear
from app.moshi_internals import keep_kv_dtype

log = logging.getLogger(__name__)

QUANTIZED_PRECISIONS = ("int8", "fp8", "int4")


class QuantizationUnavailable(RuntimeError):
    """The quantized kernels are missing or cannot run on this machine."""


@dataclass(frozen=True)
class QuantizedLinears:
    layers: int  # linear layers replaced
    bytes_before: int  # of their weights
    bytes_after: int  # the quantized weights and their scales (and zeros)


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


def _replace_linears(lm: LMModel, make: Callable[[torch.nn.Linear], torch.nn.Module],
                     device: torch.device | None = None) -> QuantizedLinears:
    """Every nn.Linear under `lm` replaced by `make(layer)`, the layer first taken to
    `device` when given (then dropped: only its quantized form stays there)."""
    layers = before = after = 0

    def replace(module: torch.nn.Module) -> None:
        nonlocal layers, before, after
        for name, child in module.named_children():
            if isinstance(child, torch.nn.Linear):
                if child.bias is not None:
                    raise QuantizationUnavailable(f"{name}: quantized layers take no bias")
                before += child.weight.numel() * child.weight.element_size()
                source = child if device is None else child.to(device)
                quantized = make(source)
                del source
                setattr(module, name, quantized)
                layers += 1
                after += sum(p.numel() * p.element_size() for p in quantized.parameters())
            else:
                replace(child)

    with torch.no_grad():
        replace(lm)
    return QuantizedLinears(layers, before, after)


def _keep_kv_in_model_dtype(lm: LMModel, dtype: torch.dtype) -> None:
    for module in lm.modules():
        if isinstance(module, StreamingMultiheadAttention) and not module.cross_attention:
            keep_kv_dtype(module, dtype)


def quantize_linears_int8(lm: LMModel) -> QuantizedLinears:
    """Replace every linear layer of `lm` by moshi's int8 QLinear, in place."""
    try:
        import bitsandbytes  # noqa: F401 - QLinear imports it lazily; fail here, clearly
    except Exception as exc:
        raise QuantizationUnavailable(f"8-bit weights need bitsandbytes ({exc})") from exc
    return _replace_linears(lm, QLinear)


def quantize_linears_fp8(lm: LMModel, device: torch.device | None = None,
                         mode: str | None = None) -> QuantizedLinears:
    """Replace every linear layer of `lm` by an fp8 layer made on `device` (default: where
    the LM is), in place; `mode` as fp8_linear.fp8_mode finds it there by default."""
    device = device or lm.device
    mode = mode or fp8_mode(device)
    if mode is None:
        raise QuantizationUnavailable(f"fp8 products do not run on {device} with torch "
                                      f"{torch.__version__}")
    dtype = lm.dtype
    summary = _replace_linears(lm, lambda layer: Fp8Linear(layer, mode), device)
    _keep_kv_in_model_dtype(lm, dtype)
    return summary


def quantize_linears_int4(lm: LMModel, device: torch.device | None = None,
                          group_size: int = INT4_GROUP_SIZE) -> QuantizedLinears:
    """Replace every linear layer of `lm` by a 4-bit layer made on `device` (default: where
    the LM is), in place."""
    dtype = lm.dtype
    summary = _replace_linears(lm, lambda layer: Int4Linear(layer, group_size),
                               device or lm.device)
    _keep_kv_in_model_dtype(lm, dtype)
    return summary


def quantize_linears(lm: LMModel, precision: str, device: torch.device | None = None
                     ) -> QuantizedLinears:
    """The LM's linear layers at `precision` (int8, fp8 or int4), made on `device` (fp8 and
    int4; int8 quantizes where the LM is)."""
    if precision == "int8":
        return quantize_linears_int8(lm)
    if precision == "fp8":
        return quantize_linears_fp8(lm, device)
    if precision == "int4":
        return quantize_linears_int4(lm, device)
    raise ValueError(f"{precision} is not a quantized precision "
                     f"({', '.join(QUANTIZED_PRECISIONS)})")
