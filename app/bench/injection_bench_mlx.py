"""`python main.py bench injection --device mlx`: the injection bench on the MLX engine.

The torch bench's figures (injection_bench.py), measured on what MlxEngine runs: a frame is
the engine's own `_model_frame` (Mimi encode, one MlxLmGen step with its depformer, Mimi
decode), a span chunk is the engine's `read_positions` (ONE forward of K positions through
the MLX transformer and its KV ring). Two generators on the one MLX LM (the weights are
shared; each has its own stream) are driven by the same frames, greedy, so `max_diff`
compares the transformer outputs of a K-position forward and of K one-position forwards
from identical states, early in the conversation and again after the ring has wrapped.
Timings are medians measured in this one run; MLX captures no graphs, so the one prefill
time is the engine's path. Every MLX forward ends in `mx.eval`: a call returns when its
work is done, so a timing covers the computation, not only its scheduling.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import mlx.core as mx
import numpy as np
import torch

from app.checkpoints.catalog import get_manifest
from app.checkpoints.loader import ensure_built
from app.engine.duplex_engine import EngineOptions
from app.engine.frame_budget import largest_k_in_budget
from app.engine.mlx.checkpoint import PRECISION_LABELS, load_mlx_checkpoint
from app.engine.mlx.lm import ZERO_TOKEN
from app.engine.mlx.lm_gen import MlxLmGen
from app.engine.mlx.mlx_engine import MlxEngine, read_positions
from app.engine.mlx.sampling import Sampling
from app.frames import FRAME_MS, FRAME_SAMPLES

# What each figure includes (printed with them, under "meaning").
MEANING = {
    "step_ms": "median of one frame as MlxEngine runs it: Mimi encode (torch, CPU), one "
               "MlxLmGen step (the temporal transformer over 1 position, the depformer's "
               "dep_q steps, greedy), Mimi decode",
    "lm_step_ms": "median of the MlxLmGen step alone (transformer + depformer, greedy), "
                  "without Mimi: the MLX part of step_ms",
    "k.prefill_ms": "median of one span chunk of K padding tokens read as the engine reads "
                    "it: ONE forward of K positions through the MLX transformer and its KV "
                    "ring, with mx.eval (no graphs on MLX: this is the engine's path)",
    "k.sequential_ms": "median of the same K positions fed as K one-position forwards",
    "k.ratio": "sequential_ms / prefill_ms",
    "k.max_diff": "largest absolute difference of the transformer outputs [K, dim] of the "
                  "K-position forward and of the K one-position forwards, from identical "
                  "states early in the conversation",
    "k.max_diff_after_wrap": "the same after context + 25 frames (the KV ring has wrapped)",
    "budget_ms": "the frame (80 ms) less the margin the engine keeps free",
    "max_k_in_budget": "the largest K whose prefill plus one frame fits in budget_ms, "
                       "interpolated between the measured K (what the engine's chunk limit "
                       "would be on this machine)",
    "torch_threads": "the threads torch (Mimi) runs on; MLX's CPU backend computes each op "
                     "on its own",
}


def _median_ms(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000.0)
    return statistics.median(times)


def _outputs(gen: MlxLmGen, ids: list[int]) -> np.ndarray:
    """The transformer outputs [K, dim] of a span's K positions in one forward (the columns
    read_positions feeds: text ids, the zero token elsewhere)."""
    codes = np.full((gen.num_codebooks, len(ids)), ZERO_TOKEN, dtype=np.int64)
    codes[0] = ids
    out, _ = gen.lm.forward_text(mx.array(codes[None]), gen.stream)
    mx.eval(out, *gen.stream.arrays())
    return np.asarray(out[0].astype(mx.float32))


def run_mlx_injection_bench(model_id: str, precision: str = "auto",
                            ks: tuple[int, ...] = (16, 64, 256), repeats: int = 7,
                            margin: float = 0.25, check_wrap: bool = True) -> dict:
    manifest = get_manifest(model_id)
    if manifest.generator == "forcing" or manifest.span_placement.kind == "block":
        raise ValueError(f"{model_id} injects span blocks through the forcing generator; "
                         "this bench measures span positions (vanilla Moshi: tiny, moshi-*)")
    checkpoint = load_mlx_checkpoint(manifest, ensure_built(manifest), precision)
    engine = MlxEngine(checkpoint, EngineOptions(greedy=True, chunk_limit=max(ks)))
    gen_a = engine.lm_gen
    if not isinstance(gen_a, MlxLmGen):
        raise ValueError(f"{model_id}: the MLX engine drives it with "
                         f"{type(gen_a).__name__}, not MlxLmGen")
    lm = checkpoint.mlx_lm
    shape = lm.shape
    gen_a.max_chunk = max(ks)  # the rings hold the longest chunk exactly, as the engine's
    gen_b = MlxLmGen(lm, Sampling(greedy=True), max_chunk=max(ks))
    generator = torch.Generator().manual_seed(0)
    mimi = checkpoint.mimi

    def step_both(frames: int) -> None:
        for _ in range(frames):
            codes = torch.randint(0, shape.card, (8,), generator=generator).tolist()
            gen_a.step(codes)
            gen_b.step(codes)

    def diff(k: int) -> float:
        ids = torch.randint(4, shape.text_card, (k,), generator=generator).tolist()
        one_pass = _outputs(gen_a, ids)
        one_by_one = np.concatenate([_outputs(gen_b, [i]) for i in ids], axis=0)
        return float(np.abs(one_pass - one_by_one).max())

    results: list[dict[str, Any]] = []  # one JSON row per k
    silence = np.zeros(FRAME_SAMPLES, dtype=np.float32)
    with torch.no_grad(), mimi.streaming(1):
        gen_a.reset()
        for _ in range(4):  # warm-up
            engine._model_frame(silence)
        step_ms = _median_ms(lambda: engine._model_frame(silence), max(repeats, 15))
        user = [0] * 8
        lm_step_ms = _median_ms(lambda: gen_a.step(user), max(repeats, 15))
        for k in ks:
            gen_a.reset()
            gen_b.reset()
            step_both(8)
            max_diff = diff(k)
            pad = [shape.text_padding_id] * k

            def one_forward(pad: list[int] = pad) -> None:
                read_positions(gen_a, pad)

            def k_forwards(pad: list[int] = pad) -> None:
                for token in pad:
                    read_positions(gen_b, [token])

            prefill_ms = _median_ms(one_forward, repeats)
            sequential_ms = _median_ms(k_forwards, max(3, repeats // 2))
            results.append({
                "k": k,
                "prefill_ms": round(prefill_ms, 3),
                "sequential_ms": round(sequential_ms, 3),
                "ratio": round(sequential_ms / prefill_ms, 2),
                "max_diff": max_diff,
            })
        if check_wrap:
            gen_a.reset()
            gen_b.reset()
            step_both(shape.context + 25)  # past the context window
            for row in results:
                row["max_diff_after_wrap"] = diff(row["k"])
                step_both(3)

    budget_ms = FRAME_MS * (1.0 - margin)
    prefill_by_k = {row["k"]: row["prefill_ms"] for row in results}
    return {
        "device": f"mlx ({'gpu' if mx.default_device() == mx.gpu else 'cpu'})",
        "model": model_id,
        "precision": checkpoint.precision,
        "dtype": PRECISION_LABELS[checkpoint.precision],
        "context_window": shape.context,
        "step_ms": round(step_ms, 3),
        "lm_step_ms": round(lm_step_ms, 3),
        "budget_ms": budget_ms,
        "k": results,
        "max_k_in_budget": largest_k_in_budget(step_ms, prefill_by_k, budget_ms, cap=max(ks)),
        "torch_threads": torch.get_num_threads(),
        "meaning": MEANING,
    }


def describe(result: dict) -> str:
    lines = [f"{result['model']} on {result['device']} ({result['precision']} weights): "
             f"frame {result['step_ms']:.2f} ms (Mimi encode + MLX LM step + Mimi decode; "
             f"the LM step alone {result['lm_step_ms']:.2f} ms), "
             f"budget {result['budget_ms']:.0f} ms, max K in budget {result['max_k_in_budget']}"]
    for row in result["k"]:
        lines.append(f"  K={row['k']:5}  one forward {row['prefill_ms']:8.2f} ms  K forwards "
                     f"{row['sequential_ms']:9.2f} ms  ratio {row['ratio']:7.2f}  "
                     f"max_diff {row['max_diff']:.2e}  "
                     f"after wrap {row.get('max_diff_after_wrap', 0):.2e}")
    return "\n".join(lines)
