"""The torch engine's checkpoint at a precision: fp32 and bf16 as the loader loads them, int8
(moshi's bitsandbytes QLinear), fp8 (fp8_linear.Fp8Linear) and int4 (int4_linear.Int4Linear)
quantized at load (app/engine/quantize.py).

A quantized model is meant for a GPU too small for its 16-bit weights (a 7B in bf16 is 15.4
GB; a 12 or 16 GB card holds it only at 8 bits, an 8 GB card at 4). So the float weights are
loaded on the CPU, in the RAM, and the card never holds the 16-bit copy: int8 quantizes there
and moves; fp8 and int4 take one float layer at a time to the device, quantize it there (their
layouts are the device's) and drop it. Each precision is checked against the machine before
anything loads, and a precision that does not run here is refused with the reason and what
does run.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

import torch
from moshi.utils.quantize import QLinear

from app.checkpoints.catalog import Manifest
from app.checkpoints.loader import LoadedCheckpoint, load_checkpoint, parse_dtype, runtime_dtype
from app.engine.fp8_linear import Fp8Linear, fp8_unavailable_reason
from app.engine.int4_linear import Int4Linear, int4_unavailable_reason
from app.engine.precision import FLOAT_DTYPES, TORCH_PRECISIONS, PrecisionError
from app.engine.quantize import QuantizedLinears, int8_unavailable_reason, quantize_linears

log = logging.getLogger(__name__)


def unavailable_reason(precision: str, device: torch.device) -> str | None:
    """None when the torch engine runs `precision` on `device`; else why not."""
    if precision not in TORCH_PRECISIONS:
        return (f"precision {precision} is not the torch engine's ({', '.join(TORCH_PRECISIONS)}"
                "); q8 and q4 run on the MLX engine (device mlx)")
    if precision == "int8":
        return int8_unavailable_reason(device)
    if precision == "fp8":
        return fp8_unavailable_reason(device)
    if precision == "int4":
        return int4_unavailable_reason(device)
    return None


def precision_offer(device: torch.device) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...],
                                                  tuple[str, ...]]:
    """What the torch engine offers on `device`: the precisions that run there (in
    TORCH_PRECISIONS' order), those that do not with why, and what "auto" picks from there,
    best first (precision.DEVICE_PRECISIONS, less what does not run). Each is tried there
    (int8 loads a small layer), so this is what loading will find."""
    from app.engine.precision import DEVICE_PRECISIONS, MLX_PRECISIONS, PRECISION_NAMES

    runs: list[str] = []
    not_here: list[tuple[str, str]] = []
    for precision in TORCH_PRECISIONS:
        why = unavailable_reason(precision, device)
        if why is None:
            runs.append(precision)
        else:
            not_here.append((precision, why))
    for precision in MLX_PRECISIONS:
        if precision not in TORCH_PRECISIONS:
            not_here.append((precision, f"{PRECISION_NAMES[precision]} runs on the MLX engine "
                                        "(device mlx), not on torch's"))
    kind = {"cuda": "cuda", "mps": "mac"}.get(device.type, "cpu")
    auto = tuple(p for p in DEVICE_PRECISIONS[kind] if p in runs) or tuple(runs[:1])
    return tuple(runs), tuple(not_here), auto


def load_torch_checkpoint(manifest: Manifest, folder: Path, device: torch.device,
                          precision: str) -> LoadedCheckpoint:
    """The checkpoint on `device` with its LM at `precision` (fp32, bf16, int8, fp8, int4);
    PrecisionError where that does not run here."""
    why_not = unavailable_reason(precision, device)
    if why_not is not None:
        raise PrecisionError(why_not)
    if precision in FLOAT_DTYPES:
        return load_checkpoint(manifest, folder, device, parse_dtype(FLOAT_DTYPES[precision]))
    # The floats under the quantized weights (embeddings, norms): the manifest's dtype on a
    # GPU, float32 on a CPU (loader.runtime_dtype).
    dtype = runtime_dtype(manifest.sampling.dtype, device)
    checkpoint = load_checkpoint(manifest, folder, torch.device("cpu"), dtype)
    summary: QuantizedLinears = quantize_linears(checkpoint.lm, precision, device)
    log.info("%s: %d linear layers at %s, %.2f GB of weights instead of %.2f GB", manifest.id,
             summary.layers, precision, summary.bytes_after / 1e9, summary.bytes_before / 1e9)
    if device.type != "cpu":
        checkpoint.lm.to(device)
        checkpoint.mimi.to(device)
    return replace(checkpoint, device=device)


def loaded_precision(checkpoint: object) -> str:
    """What a loaded checkpoint runs at, as everything that names it says it (the status
    bar, the transcript's notice and header, EngineReady.dtype, the log): "int8", "fp8" and
    "int4" for quantized weights (read from its layers: what was quantized is what runs),
    "q8" and "q4" for MLX's, else its float dtype ("float32", "bfloat16", "float16")."""
    mlx_precision = getattr(checkpoint, "precision", None)
    if isinstance(mlx_precision, str):  # app/engine/mlx/checkpoint.MlxCheckpoint
        return FLOAT_DTYPES.get(mlx_precision, mlx_precision)
    lm = getattr(checkpoint, "lm", None)
    if lm is not None:
        kinds = {type(module) for module in lm.modules()}
        if Fp8Linear in kinds:
            return "fp8"
        if Int4Linear in kinds:
            return "int4"
        if QLinear in kinds:
            return "int8"
    return str(getattr(checkpoint, "dtype", "")).removeprefix("torch.")
