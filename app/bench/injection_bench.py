"""`python main.py bench injection`: one K-position prefill against K one-position feeds.

Both run from identical model states (two copies of the model, driven by the same frames
with greedy sampling), so `max_diff` compares the transformer outputs of the two feeds;
it is measured early in the conversation and again after the context window has wrapped.
Timings are medians measured in this one run, reported as a ratio.
"""

from __future__ import annotations

import copy
import statistics
import time
from typing import Any

import torch
from moshi.models import LMGen

from app.checkpoints.catalog import get_manifest
from app.checkpoints.loader import ensure_built, load_checkpoint, parse_dtype
from app.engine.device import choose_device, synchronize
from app.engine.frame_budget import largest_k_in_budget
from app.engine.kv_ring import widen_attention_rings
from app.engine.position_forwards import PositionForwards, widest_forward
from app.engine.span_injector import prefill
from app.frames import FRAME_MS, FRAME_SAMPLES


def _median_ms(fn, repeats: int, device: torch.device) -> float:
    times = []
    for _ in range(repeats):
        synchronize(device)
        start = time.perf_counter()
        fn()
        synchronize(device)
        times.append((time.perf_counter() - start) * 1000.0)
    return statistics.median(times)


@torch.no_grad()
def run_injection_bench(
    model_id: str,
    device: str | None = None,
    dtype: str | None = None,
    ks: tuple[int, ...] = (16, 64, 256),
    repeats: int = 7,
    margin: float = 0.25,
    check_wrap: bool = True,
) -> dict:
    manifest = get_manifest(model_id)
    torch_device = choose_device(device)
    if manifest.builder == "moshi-7b-random" and torch_device.type == "cpu":
        raise ValueError(f"{model_id} is for timing on a GPU (two copies of about 16 GB in "
                         "bf16); no GPU was found here")
    checkpoint = load_checkpoint(
        manifest, ensure_built(manifest), torch_device, parse_dtype(dtype) if dtype else None
    )
    lm_a = checkpoint.lm
    lm_b = copy.deepcopy(lm_a)
    gen_a = LMGen(lm_a, use_sampling=False)
    gen_b = LMGen(lm_b, use_sampling=False)
    mimi = checkpoint.mimi
    text_card = lm_a.text_card
    generator = torch.Generator().manual_seed(0)
    user_card = lm_a.card

    def user_codes() -> torch.Tensor:
        return torch.randint(0, user_card, (1, 8, 1), generator=generator).to(torch_device)

    def step_both(frames: int) -> None:
        for _ in range(frames):
            codes = user_codes()
            gen_a.step(codes)
            gen_b.step(codes)

    def diff(k: int) -> float:
        ids = torch.randint(4, text_card, (k,), generator=generator).tolist()
        one_pass = prefill(gen_a, ids)
        one_by_one = torch.cat([prefill(gen_b, [i]) for i in ids], dim=1)
        return float((one_pass.float() - one_by_one.float()).abs().max())

    results: list[dict[str, Any]] = []  # one JSON row per k
    with mimi.streaming(1), gen_a.streaming(1), gen_b.streaming(1):
        widen_attention_rings(lm_a, widest_forward(lm_a, max(ks)))
        widen_attention_rings(lm_b, max(ks))
        silence = torch.zeros(1, 1, FRAME_SAMPLES, device=torch_device)

        def full_frame() -> None:
            tokens = gen_a.step(mimi.encode(silence))
            if tokens is not None:
                mimi.decode(tokens[:, 1:])

        step_both(4)  # warm-up (captures the CUDA graphs)
        step_ms = _median_ms(full_frame, max(repeats, 15), torch_device)
        for k in ks:
            gen_a.reset_streaming()
            gen_b.reset_streaming()
            step_both(8)
            max_diff = diff(k)
            pad = [lm_a.text_padding_token_id] * k
            prefill_ms = _median_ms(lambda pad=pad: prefill(gen_a, pad), repeats, torch_device)
            # The engine's path: padded to a CUDA-graphed size on a GPU
            # (captured on its second use, so two untimed calls first).
            forwards = PositionForwards(lm_a)
            for _ in range(2):
                prefill(gen_a, pad, forwards)
            graphed_ms = _median_ms(lambda pad=pad, f=forwards: prefill(gen_a, pad, f),
                                    repeats, torch_device)
            sequential_ms = _median_ms(
                lambda pad=pad: [prefill(gen_b, [t]) for t in pad], max(3, repeats // 2),
                torch_device,
            )
            results.append({
                "k": k,
                "prefill_ms": round(prefill_ms, 3),
                "prefill_graphed_ms": round(graphed_ms, 3),
                "sequential_ms": round(sequential_ms, 3),
                "ratio": round(sequential_ms / prefill_ms, 2),
                "max_diff": max_diff,
            })
        if check_wrap:
            assert lm_a.context is not None, "a model without a context window never wraps"
            gen_a.reset_streaming()
            gen_b.reset_streaming()
            step_both(lm_a.context + 25)  # past the context window
            for row in results:
                row["max_diff_after_wrap"] = diff(row["k"])
                step_both(3)

    budget_ms = FRAME_MS * (1.0 - margin)
    prefill_by_k = {row["k"]: row["prefill_ms"] for row in results}
    max_k = largest_k_in_budget(step_ms, prefill_by_k, budget_ms, cap=max(ks))
    graphed_by_k = {row["k"]: row["prefill_graphed_ms"] for row in results}
    max_k_graphed = largest_k_in_budget(step_ms, graphed_by_k, budget_ms, cap=max(ks))
    return {
        "device": str(torch_device) if torch_device.type != "cuda"
        else f"cuda ({torch.cuda.get_device_name(torch_device)})",
        "model": model_id,
        "dtype": str(checkpoint.dtype).removeprefix("torch."),
        "context_window": int(lm_a.context or 0),  # as the engine reads it
        "step_ms": round(step_ms, 3),
        "budget_ms": budget_ms,
        "k": results,
        "max_k_in_budget": max_k,
        "max_k_in_budget_graphed": max_k_graphed,  # the engine's path (GPU: graphed pieces)
        "torch_threads": torch.get_num_threads(),
    }
