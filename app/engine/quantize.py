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
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from moshi.models import LMModel


class QuantizationUnavailable(RuntimeError):
    """bitsandbytes is missing or cannot run on this machine."""


@dataclass(frozen=True)
class QuantizedLinears:
    layers: int  # linear layers replaced
    bytes_before: int  # of their weights
    bytes_after: int  # int8 weights and their float32 scales


def quantize_linears_int8(lm: LMModel) -> QuantizedLinears:
    """Replace every linear layer of `lm` by moshi's int8 QLinear, in place."""
    try:
        from moshi.utils.quantize import QLinear
    except ImportError as exc:  # pragma: no cover - moshi always has it
        raise QuantizationUnavailable(f"moshi has no 8-bit path here ({exc})") from exc
    try:
        import bitsandbytes  # noqa: F401 - QLinear imports it lazily; fail here, clearly
    except Exception as exc:
        raise QuantizationUnavailable(f"8-bit weights need bitsandbytes ({exc})") from exc
    layers = before = after = 0

    def replace(module: torch.nn.Module) -> None:
        nonlocal layers, before, after
        for name, child in module.named_children():
            if isinstance(child, torch.nn.Linear):
                if child.bias is not None:
                    raise QuantizationUnavailable(f"{name}: QLinear takes no bias")
                quantized = QLinear(child)
                setattr(module, name, quantized)
                layers += 1
                before += child.weight.numel() * child.weight.element_size()
                after += sum(p.numel() * p.element_size() for p in quantized.parameters())
            else:
                replace(child)

    with torch.no_grad():
        replace(lm)
    return QuantizedLinears(layers, before, after)
