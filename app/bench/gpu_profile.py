"""Where a span block's time goes on a CUDA GPU: torch.profiler over block(n) + step and over
plain steps, on bench gpu's rig (the random 7B by default, built on the GPU).

Written under `--out`:
- profile_block.txt / profile_step.txt: the kernel table, top 30 by device time (self);
- profile.json: the figures below, for docs/measurements.md or the next issue;
- trace_block.json: the Chrome trace of ONE block + step (chrome://tracing, Perfetto).
Figures:
- wall_ms: block + step and a step, synchronised, median of the profiled repeats;
- weights: bytes of the temporal transformer and the depformer, the forwards one block
  takes (position_forwards.padded_pieces: each reads every weight once), and the floor
  that sets at the device's memory bandwidth (`--bandwidth-tbs`, H200: 4.8) and at its
  dense bf16 rate (`--tflops`, H200: 990);
- device timeline: kernel time, and the gaps between one kernel's end and the next's
  start inside the profiled region (host gaps: launch overhead, Python, syncs), their sum,
  the largest, and how many exceed 20 microseconds.
`--allow-cpu --model tiny-cs` runs every path on a CPU (no device timeline: its figures are
null), as the tests do: `python -m app.bench.gpu_profile --out DIR --model tiny-cs
--allow-cpu --block 16`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

from app.bench.gpu_bench import (
    GpuBenchError,
    _block,
    _build_rig,
    _environment,
    _read_block,
    _resolve_device,
    _Rig,
    _start,
    _step,
    _warm_up,
    streaming_for_blocks,
)
from app.checkpoints.loader import runtime_dtype
from app.engine.device import synchronize
from app.engine.position_forwards import padded_pieces

TOP_KERNELS = 30
GAP_US = 20.0  # a device gap longer than this is counted
MAX_TRACE_BYTES = 15 * 2**20


def _weights(rig: _Rig) -> dict[str, int]:
    lm = rig.lm
    temporal = sum(p.numel() * p.element_size() for p in lm.transformer.parameters())
    depformer = sum(p.numel() * p.element_size() for p in lm.depformer.parameters())
    everything = sum(p.numel() * p.element_size() for p in lm.parameters())
    return {"temporal_bytes": temporal, "depformer_bytes": depformer, "all_bytes": everything}


def _device_timeline(prof: profile) -> dict[str, Any]:
    """Kernel time and the gaps between kernels on the device, inside the profile."""
    spans = sorted((e.time_range.start, e.time_range.end) for e in prof.events()
                   if e.device_type == torch.autograd.DeviceType.CUDA)
    if not spans:
        return {"kernels": 0, "kernel_ms": None, "span_ms": None, "gap_ms": None,
                "largest_gap_us": None, "gaps_over_20us": None}
    busy, gaps, end = 0.0, [], spans[0][0]
    for start, stop in spans:
        if start > end:
            gaps.append(start - end)
        busy += max(0.0, stop - max(start, end))
        end = max(end, stop)
    return {"kernels": len(spans), "kernel_ms": round(busy / 1000.0, 3),
            "span_ms": round((end - spans[0][0]) / 1000.0, 3),
            "gap_ms": round(sum(gaps) / 1000.0, 3),
            "largest_gap_us": round(max(gaps), 1) if gaps else 0.0,
            "gaps_over_20us": sum(g > GAP_US for g in gaps)}


def _table(prof: profile, cuda: bool) -> str:
    key = "self_cuda_time_total" if cuda else "self_cpu_time_total"
    return str(prof.key_averages().table(sort_by=key, row_limit=TOP_KERNELS))


def _timed(rig: _Rig, work: Any) -> float:
    synchronize(rig.device)
    start = time.perf_counter()
    work()
    synchronize(rig.device)
    return (time.perf_counter() - start) * 1000.0


def run_profile(out: Path, model: str | None = None, device: str | None = None,
                dtype: str = "bfloat16", n: int = 600, repeats: int = 5, steps: int = 20,
                allow_cpu: bool = False, bandwidth_tbs: float = 4.8, tflops: float = 990.0,
                seed: int = 0) -> dict[str, Any]:
    began = time.perf_counter()
    torch_device = _resolve_device(device, allow_cpu)
    if model is None and torch_device.type != "cuda":
        raise GpuBenchError("the random 7B is built on a CUDA GPU only; on a CPU use "
                            "--model tiny-cs --allow-cpu")
    if n < 2 or repeats < 1 or steps < 1:
        raise GpuBenchError("a block holds at least its two ids; repeats and steps >= 1")
    torch_dtype = runtime_dtype(dtype, torch_device)
    cuda = torch_device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    with torch.no_grad():
        rig, model_name = _build_rig(model, torch_device, torch_dtype, dtype, seed)
        with streaming_for_blocks(rig, (n,)):
            _warm_up(rig, (n,))
            block_ms, step_ms = [], []

            def block_and_step() -> None:
                if rig.positions + n + 4 > rig.context:
                    _start(rig)
                _read_block(rig, _block(rig, n))
                _step(rig)

            _start(rig)
            with profile(activities=activities) as block_prof:
                for _ in range(repeats):
                    block_ms.append(_timed(rig, block_and_step))
                    _step(rig)  # a plain frame between two blocks, as in a conversation
            _start(rig)
            with profile(activities=activities) as step_prof:
                for _ in range(steps):
                    step_ms.append(_timed(rig, lambda: _step(rig)))
            _start(rig)
            with profile(activities=activities) as one_prof:
                _timed(rig, block_and_step)
    trace = out / "trace_block.json"
    one_prof.export_chrome_trace(str(trace))
    if trace.stat().st_size > MAX_TRACE_BYTES:  # the device tool brings back 16 MiB a file
        trace.unlink()
    (out / "profile_block.txt").write_text(_table(block_prof, cuda), encoding="utf-8")
    (out / "profile_step.txt").write_text(_table(step_prof, cuda), encoding="utf-8")
    weights = _weights(rig)
    pieces = padded_pieces(n) if cuda else [(n, n)]
    params = sum(p.numel() for p in rig.lm.transformer.parameters())
    result = {
        "bench": "gpu_profile", "model": model_name, **_environment(torch_device, torch_dtype),
        "block": n, "repeats": repeats, "steps": steps,
        "wall_ms": {"block_plus_step": round(statistics.median(block_ms), 3),
                    "step": round(statistics.median(step_ms), 3)},
        "weights": {**weights, "forwards_per_block": len(pieces),
                    "padded_positions": sum(size for _, size in pieces),
                    "bandwidth_tbs": bandwidth_tbs, "tflops": tflops,
                    # every forward reads every temporal weight once
                    "read_floor_ms": round(len(pieces) * weights["temporal_bytes"]
                                           / (bandwidth_tbs * 1e12) * 1000.0, 3),
                    # 2 FLOP per weight per position, padding included
                    "compute_floor_ms": round(2.0 * params * sum(s for _, s in pieces)
                                              / (tflops * 1e12) * 1000.0, 3)},
        "device_timeline": {"block": _device_timeline(block_prof),
                            "step": _device_timeline(step_prof)},
        "files": ["profile_block.txt", "profile_step.txt"]
        + (["trace_block.json"] if trace.exists() else []),
        "wall_s": round(time.perf_counter() - began, 3),
    }
    (out / "profile.json").write_text(json.dumps(result, indent=1), encoding="utf-8")
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m app.bench.gpu_profile",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--model", default=None, help="catalog id (default: the random 7B)")
    parser.add_argument("--device", default=None)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--block", type=int, default=600)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--allow-cpu", action="store_true")
    parser.add_argument("--bandwidth-tbs", type=float, default=4.8)
    parser.add_argument("--tflops", type=float, default=990.0)
    args = parser.parse_args(argv)
    try:
        result = run_profile(args.out, args.model, args.device, args.dtype, args.block,
                             args.repeats, args.steps, args.allow_cpu, args.bandwidth_tbs,
                             args.tflops)
    except GpuBenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
