"""`python main.py bench gpu --precision bf16,fp8,int4`: `bench gpu`'s figures at each
precision of the torch engine, on one GPU, one after the other, and how far each one's
tokens follow the first precision's.

For each precision the rig is built again from the same seed (the same random weights, or
the same checkpoint), its linear layers quantized where the precision asks (int8: moshi's
bitsandbytes QLinear; fp8: float8 e4m3 products in torch._scaled_mm; int4: 4-bit weights in
torch's int4 kernel; app/engine/quantize.py), and measured as
`bench gpu` measures: the step, the full frame, block + step for each block size, the
exactness twins and the graphed replay. Then:
- memory: the weights' bytes, and torch's peak over the measurements (reset after the
  quantization, so the 16-bit copy a quantized layer replaces is not counted);
- agreement with the reference (the first precision listed, bf16 by default): one greedy
  run, the same for each (the start, live frames, a block, live frames, from the same user
  codes); the share of steps whose text token and whose whole frame (text + 16 codebooks)
  equal the reference's, and the first step that differs. Greedy runs part after their
  first difference, so these are upper-bound-free: a flipped token changes all after it.

fp8 is refused where the GPU has none, int4 below Ampere; with --allow-cpu every precision
runs on the CPU (fp8 through the CPU's per-tensor `_scaled_mm`, int4 through its CPU kernel),
for testing the command's paths.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any

import torch

from app.bench.gpu_bench import (
    CHECK_STEPS,
    SETTLE_STEPS,
    GpuBenchError,
    _block,
    _build_rig,
    _check_request,
    _environment,
    _measure,
    _read_block,
    _resolve_device,
    _Rig,
    _start,
    _step,
    streaming_for_blocks,
)
from app.engine.fp8_linear import fp8_unavailable_reason
from app.engine.int4_linear import int4_unavailable_reason
from app.engine.precision import TORCH_PRECISIONS
from app.engine.quantize import QUANTIZED_PRECISIONS, int8_unavailable_reason, quantize_linears

# The float dtype each precision builds its model in (the quantized ones quantize a bf16 model).
BUILD_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "int8": "bfloat16", "fp8": "bfloat16",
                "int4": "bfloat16"}
AGREEMENT_STEPS = 2 * CHECK_STEPS  # live frames before the block and after it, each


def parse_precisions(text: str) -> tuple[str, ...]:
    """"bf16,fp8,int4" -> ("bf16", "fp8", "int4"); GpuBenchError for an unknown one."""
    names = tuple(dict.fromkeys(p.strip() for p in text.split(",") if p.strip()))
    unknown = [p for p in names if p not in TORCH_PRECISIONS]
    if not names or unknown:
        raise GpuBenchError(f"--precision takes a comma-separated list of "
                            f"{', '.join(TORCH_PRECISIONS)}"
                            + (f", not {', '.join(unknown)}" if unknown else ""))
    return names


def _check_runs(precision: str, device: torch.device, allow_cpu: bool) -> None:
    why_not = None
    if precision == "int8":
        why_not = int8_unavailable_reason(device)
    elif precision == "fp8" and not (allow_cpu and device.type == "cpu"):
        why_not = fp8_unavailable_reason(device)
    elif precision == "int4":
        why_not = int4_unavailable_reason(device)
    if why_not is not None:
        raise GpuBenchError(why_not)


def _quantize(rig: _Rig, precision: str) -> dict[str, Any]:
    weights_before = _weight_bytes(rig)
    if precision in QUANTIZED_PRECISIONS:
        layers = quantize_linears(rig.lm, precision, rig.device).layers
    else:
        layers = 0
    gc.collect()
    if rig.device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(rig.device)
    weights = _weight_bytes(rig)
    return {"quantized_layers": layers, "weights_bytes": weights,
            "weights_gb": round(weights / 2**30, 3),
            "weights_gb_before_quantizing": round(weights_before / 2**30, 3)}


def _weight_bytes(rig: _Rig) -> int:
    return sum(p.numel() * p.element_size() for p in rig.lm.parameters())


def agreement_run(rig: _Rig, block: int) -> torch.Tensor:
    """One greedy run, the same for every precision: frames [steps, 1 + dep_q] on the CPU."""
    _start(rig, live_steps=SETTLE_STEPS)
    frames = []
    for _ in range(AGREEMENT_STEPS):
        frames.append(_step(rig))
    _read_block(rig, _block(rig, block))
    for _ in range(AGREEMENT_STEPS):
        frames.append(_step(rig))
    assert all(f is not None for f in frames), "steps after the start return frames"
    return torch.stack([torch.from_numpy(f.reshape(-1)) for f in frames if f is not None])


def agreement(reference: torch.Tensor, other: torch.Tensor) -> dict[str, Any]:
    text = reference[:, 0] == other[:, 0]
    whole = (reference == other).all(dim=1)
    differ = (~whole).nonzero()
    return {"steps": int(reference.shape[0]),
            "text_tokens": round(float(text.float().mean()), 4),
            "frames": round(float(whole.float().mean()), 4),
            "first_difference": int(differ[0, 0]) if len(differ) else None}


@torch.no_grad()
def run_precision_bench(
    precisions: tuple[str, ...],
    model: str | None = None,
    device: str | None = None,
    blocks: tuple[int, ...] = (16, 64, 256, 400, 600),
    repeats: int = 7,
    allow_cpu: bool = False,
    seed: int = 0,
    progress: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """`progress`: called with each precision's row as soon as it is measured."""
    began = time.perf_counter()
    torch_device = _resolve_device(device, allow_cpu)
    blocks = tuple(dict.fromkeys(int(n) for n in blocks))
    _check_request(blocks, repeats)
    if model is None and torch_device.type != "cuda":
        raise GpuBenchError("the random 7B is built on a CUDA GPU only (about 16 GB); on "
                            "a CPU use --model tiny-cs --allow-cpu")
    for precision in precisions:  # refused before anything is built
        _check_runs(precision, torch_device, allow_cpu)
    cuda = torch_device.type == "cuda"
    rows: list[dict[str, Any]] = []
    reference: torch.Tensor | None = None
    name = ""
    for precision in precisions:
        with torch.random.fork_rng(devices=[torch_device] if cuda else []):
            torch.manual_seed(seed)  # the same weights and inputs for each precision
            row, frames, name = _one_precision(model, torch_device, precision, blocks,
                                               repeats, seed)
        if reference is None:
            reference = frames
        row["agreement_with"] = precisions[0]
        row["agreement"] = agreement(reference, frames)
        rows.append(row)
        if progress is not None:
            progress(row)
    environment = _environment(torch_device, torch.float32)
    environment.pop("dtype")  # each precision has its own (its row's float_dtype)
    return {"bench": "gpu-precision", "model": name, **environment, "precisions": rows,
            "reference_precision": precisions[0], "seed": seed,
            "includes": {
                "weights_gb": "the LM's parameters, GiB, after quantizing",
                "peak_memory_gb": "torch.cuda.max_memory_allocated from after the "
                                  "quantization to the end of the measurements; null on a CPU",
                "agreement": "one greedy run (start, live frames, a block of the largest "
                             "size, live frames) against the reference precision's: share "
                             "of equal text tokens and whole frames, the first step that "
                             "differs",
                "rest": "as bench gpu (python main.py bench gpu --help)"},
            "wall_s": round(time.perf_counter() - began, 3)}


def _one_precision(model: str | None, device: torch.device, precision: str,
                   blocks: tuple[int, ...], repeats: int, seed: int
                   ) -> tuple[dict[str, Any], torch.Tensor, str]:
    from app.checkpoints.loader import runtime_dtype

    dtype_name = BUILD_DTYPES[precision]
    rig, name = _build_rig(model, device, runtime_dtype(dtype_name, device), dtype_name, seed)
    try:
        memory = _quantize(rig, precision)
        with streaming_for_blocks(rig, blocks):
            measured = _measure(rig, blocks, repeats)
            frames = agreement_run(rig, max(blocks))
        peak = (round(torch.cuda.max_memory_allocated(device) / 2**30, 3)
                if device.type == "cuda" else None)
        dtype = str(next(iter(rig.lm.text_emb.parameters())).dtype).removeprefix("torch.")
    finally:
        del rig
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
    row = {"precision": precision, "float_dtype": dtype, **memory, "peak_memory_gb": peak,
           **measured}
    return row, frames, name


def describe_precisions(result: dict[str, Any]) -> str:
    """The table `bench gpu --precision` prints without --json."""
    rows = result["precisions"]
    sizes = [b["n"] for b in rows[0]["blocks"]]
    lines = [f"{result['model']} on {result['device']}, torch {result['torch']}, moshi "
             f"{result['moshi']}; agreement against {result['reference_precision']}",
             f"  {'precision':>9} {'step':>7} {'frame':>7} "
             + " ".join(f"{'+' + str(n):>7}" for n in sizes)
             + f" {'weights':>8} {'peak':>7} {'text':>6} {'frames':>6} {'differs':>7}"]
    for row in rows:
        blocks = {b["n"]: b["prefill_plus_step_ms"] for b in row["blocks"]}
        agree = row["agreement"]
        peak = "-" if row["peak_memory_gb"] is None else f"{row['peak_memory_gb']:.2f}"
        first = "-" if agree["first_difference"] is None else str(agree["first_difference"])
        lines.append(f"  {row['precision']:>9} {row['step_ms']:>7.2f} {row['frame_ms']:>7.2f} "
                     + " ".join(f"{blocks[n]:>7.2f}" for n in sizes)
                     + f" {row['weights_gb']:>8.3f} {peak:>7} {agree['text_tokens']:>6.2f} "
                     f"{agree['frames']:>6.2f} {first:>7}")
    lines.append("  ms: step (LM), full frame (Mimi + LM), block + step for each block size; "
                 "GiB: weights, peak; agreement: shares of equal text tokens and frames, the "
                 f"first step that differs; wall {result['wall_s']:.1f} s")
    return "\n".join(lines)
