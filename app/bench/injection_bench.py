"""`python main.py bench injection`: one K-position read against K one-position reads, and
the frame, measured on what the engine runs, torch or MLX (`--device mlx`).

Two one-row engines on the checkpoint (LocalEngine, driven here without its thread: its own
frame, step and reads) are fed the same frames, greedy, so `max_diff` compares the
transformer outputs of a K-position read and of K one-position reads from identical states,
early in the conversation and again after the context window has wrapped. On torch the
second engine runs a copy of the LM (one model streams one state); on MLX both share the
weights, each with its own stream. The generator is the checkpoint's own (columns.py):
vanilla Moshi's for tiny, the forcing one for tiny-cs. Timings are medians measured in this
one run; every number says what it includes (`meaning`).
"""

from __future__ import annotations

import copy
import statistics
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import replace
from typing import Any

import numpy as np

from app.checkpoints.catalog import get_manifest
from app.checkpoints.loader import LoadedCheckpoint, ensure_built, load_checkpoint, parse_dtype
from app.engine.columns import ZERO_TOKEN
from app.engine.frame_budget import largest_k_in_budget
from app.engine.local_engine import LocalEngine
from app.engine.speech_engine import EngineOptions
from app.frames import FRAME_MS, FRAME_SAMPLES

MEANING = {
    "step_ms": "median of one frame as the engine runs it: Mimi encode, one step (the "
               "column bookkeeping, the temporal transformer over 1 position, the "
               "depformer's dep_q steps, greedy), Mimi decode",
    "lm_step_ms": "median of the step alone (bookkeeping + transformer + depformer), "
                  "without Mimi",
    "k.prefill_ms": "median of K padding positions read as the engine reads a span chunk: "
                    "ONE forward of K positions (on a CUDA GPU padded to a graphed size)",
    "k.sequential_ms": "median of the same K positions read as K one-position forwards",
    "k.ratio": "sequential_ms / prefill_ms",
    "k.max_diff": "largest absolute difference of the transformer outputs [K, dim] of the "
                  "K-position read and of the K one-position reads, from identical states "
                  "early in the conversation",
    "k.max_diff_after_wrap": "the same once the conversation is longer than the context "
                             "window (the KV ring has wrapped)",
    "budget_ms": "the frame (80 ms) less the margin the engine keeps free",
    "max_k_in_budget": "the largest K whose read plus one frame fits in budget_ms, "
                       "interpolated between the measured K (the engine's chunk limit here)",
    "torch_threads": "the threads torch runs on (Mimi, and the LM on torch)",
}


def _median_ms(fn: Callable[[], object], repeats: int, sync: Callable[[], None]) -> float:
    times = []
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        fn()
        sync()
        times.append((time.perf_counter() - start) * 1000.0)
    return statistics.median(times)


def _load(model_id: str, device: str | None, dtype: str | None, precision: str | None
          ) -> tuple[LoadedCheckpoint, LoadedCheckpoint]:
    """The checkpoint for engine A, and B's: MLX shares the weights, torch needs a copy."""
    manifest = get_manifest(model_id)
    folder = ensure_built(manifest)
    if device == "mlx":
        from app.engine.mlx.checkpoint import load_mlx_checkpoint

        mlx_checkpoint = load_mlx_checkpoint(manifest, folder, precision or "auto")
        return mlx_checkpoint, mlx_checkpoint
    from app.engine.device import choose_device

    torch_device = choose_device(device)
    if manifest.builder == "moshi-7b-random" and torch_device.type == "cpu":
        raise ValueError(f"{model_id} is for timing on a GPU (two copies of about 16 GB in "
                         "bf16); no GPU was found here")
    checkpoint = load_checkpoint(manifest, folder, torch_device,
                                 parse_dtype(dtype) if dtype else None)
    return checkpoint, replace(checkpoint, lm=copy.deepcopy(checkpoint.lm))


def _device_name(engine: LocalEngine, checkpoint: LoadedCheckpoint) -> str:
    if engine.runtime.device_label == "mlx":
        import mlx.core as mx

        return f"mlx ({'gpu' if mx.default_device() == mx.gpu else 'cpu'})"
    device = checkpoint.device
    if device.type != "cuda":
        return str(device)
    import torch

    return f"cuda ({torch.cuda.get_device_name(device)})"


def run_injection_bench(model_id: str, device: str | None = None, dtype: str | None = None,
                        ks: tuple[int, ...] = (16, 64, 256), repeats: int = 7,
                        margin: float = 0.25, check_wrap: bool = True,
                        precision: str | None = None) -> dict[str, Any]:
    import torch

    checkpoint, twin = _load(model_id, device, dtype, precision)
    options = EngineOptions(greedy=True, chunk_limit=max(ks))
    a, b = LocalEngine(checkpoint, 1, options), LocalEngine(twin, 1, options)
    context, layout = a.context_window, a.runtime.layout
    random = np.random.default_rng(0)
    audio_card, text_card = layout.audio_initial, layout.text_initial

    def user() -> np.ndarray:
        return random.integers(0, audio_card, (1, layout.per_side), dtype=np.int64)

    def step_both(frames: int) -> None:
        for _ in range(frames):
            codes = user()
            a.step_rows([0], codes, [None])
            b.step_rows([0], codes, [None])

    def positions(ids: list[int]) -> np.ndarray:
        columns = np.full((layout.num_codebooks, len(ids)), ZERO_TOKEN, dtype=np.int64)
        columns[0] = ids
        return columns

    def diff(k: int) -> float:
        ids = random.integers(4, text_card, k).tolist()
        one_read = a.runtime.read_outputs(0, positions(ids))
        one_by_one = np.concatenate([b.runtime.read_outputs(0, positions([i])) for i in ids])
        return float(np.abs(one_read - one_by_one).max())

    def restart() -> None:
        for engine in (a, b):
            engine.book.reset(0)
            engine.runtime.reset_row(0)
        step_both(8)

    sync = a.runtime.sync
    pad = a.runtime.text_padding_id
    results: list[dict[str, Any]] = []
    with ExitStack() as streams:
        streams.enter_context(torch.no_grad())
        streams.enter_context(a.runtime.streaming(1, max(ks)))
        streams.enter_context(a.codec.streaming(1))
        streams.enter_context(b.runtime.streaming(1, max(ks)))
        a.codec.join(0)
        step_both(4)  # warm-up (captures the CUDA graphs)
        silence = np.zeros((1, FRAME_SAMPLES), dtype=np.float32)
        step_ms = _median_ms(lambda: a.model_frame([0], silence), max(repeats, 15), sync)
        zero = np.zeros((1, layout.per_side), dtype=np.int64)
        lm_step_ms = _median_ms(lambda: a.step_rows([0], zero, [None]), max(repeats, 15), sync)
        for k in ks:
            restart()
            max_diff = diff(k)
            for _ in range(2):  # a read of a new size is slow once (a graph: captured twice)
                a.read_positions(0, [pad] * k)

            def one_read(k: int = k) -> None:
                a.read_positions(0, [pad] * k)

            def k_reads(k: int = k) -> None:
                for _ in range(k):
                    b.read_positions(0, [pad])

            prefill_ms = _median_ms(one_read, repeats, sync)
            sequential_ms = _median_ms(k_reads, max(3, repeats // 2), sync)
            results.append({"k": k, "prefill_ms": round(prefill_ms, 3),
                             "sequential_ms": round(sequential_ms, 3),
                             "ratio": round(sequential_ms / prefill_ms, 2),
                             "max_diff": max_diff})
        if check_wrap:
            restart()
            # Past the context window: filler positions read alike by both engines, in
            # reads of the longest size, then a few frames.
            filler = [pad] * max(ks)
            for _ in range(context // max(ks) + 1):
                a.read_positions(0, filler)
                b.read_positions(0, filler)
            step_both(25)
            for row in results:
                row["max_diff_after_wrap"] = diff(row["k"])
                step_both(3)

    budget_ms = FRAME_MS * (1.0 - margin)
    prefill_by_k = {row["k"]: row["prefill_ms"] for row in results}
    result: dict[str, Any] = {
        "device": _device_name(a, checkpoint),
        "model": model_id,
        "dtype": a.dtype_label,
        "context_window": context,
        "step_ms": round(step_ms, 3),
        "lm_step_ms": round(lm_step_ms, 3),
        "budget_ms": budget_ms,
        "k": results,
        "max_k_in_budget": largest_k_in_budget(step_ms, prefill_by_k, budget_ms, cap=max(ks)),
        "torch_threads": torch.get_num_threads(),
        "meaning": MEANING,
    }
    if device == "mlx":
        from app.engine.mlx.checkpoint import MlxCheckpoint

        assert isinstance(checkpoint, MlxCheckpoint)
        result["precision"] = checkpoint.precision
    return result


def describe(result: dict[str, Any]) -> str:
    weights = f"{result['precision']} weights" if "precision" in result else result["dtype"]
    lines = [f"{result['model']} on {result['device']} ({weights}): "
             f"frame {result['step_ms']:.2f} ms (Mimi encode + step + Mimi decode; "
             f"the LM step alone {result['lm_step_ms']:.2f} ms), "
             f"budget {result['budget_ms']:.0f} ms, max K in budget {result['max_k_in_budget']}"]
    for row in result["k"]:
        lines.append(f"  K={row['k']:5}  one forward {row['prefill_ms']:8.2f} ms  K forwards "
                     f"{row['sequential_ms']:9.2f} ms  ratio {row['ratio']:7.2f}  "
                     f"max_diff {row['max_diff']:.2e}  "
                     f"after wrap {row.get('max_diff_after_wrap', 0):.2e}")
    return "\n".join(lines)
