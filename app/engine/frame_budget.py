"""How many span positions fit in the 80 ms frame budget, measured on this device."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from app.frames import FRAME_MS


@dataclass(frozen=True)
class ChunkBudget:
    step_ms: float  # median time of one full frame (Mimi encode, LM step, Mimi decode)
    prefill_ms: dict[int, float]  # K -> median time of one K-position prefill
    budget_ms: float  # the frame minus the safety margin
    chunk_limit: int  # largest K whose prefill plus one frame fits in budget_ms


def median_ms(fn: Callable[[], object], repeats: int, sync: Callable[[], None]) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        sync()
        times.append((time.perf_counter() - start) * 1000.0)
    return statistics.median(times)


def largest_k_in_budget(step_ms: float, prefill_ms: dict[int, float], budget_ms: float,
                        cap: int) -> int:
    """Largest K (0 if none) whose prefill plus one frame fits in the budget.

    Prefill time is interpolated linearly in K between the measured sizes."""
    # A shorter prefill never takes longer: a noisy small K must not hide a larger K that
    # was measured to fit.
    points, fastest = [], float("inf")
    for k, ms in sorted(prefill_ms.items(), reverse=True):
        fastest = min(fastest, ms)
        points.append((k, fastest))
    points.reverse()
    best = 0
    for (k0, t0), (k1, t1) in zip(points, points[1:], strict=False):
        per_position = max((t1 - t0) / max(k1 - k0, 1), 1e-6)
        for k in range(k0, k1 + 1):
            if step_ms + t0 + (k - k0) * per_position <= budget_ms:
                best = max(best, k)
    if len(points) == 1 and step_ms + points[0][1] <= budget_ms:
        best = points[0][0]
    return min(best, cap)


# A test hook on the measurement: (what, positions, measured ms) -> the ms to use, where
# `what` is "frame" (one full frame, positions 1) or "prefill" (one forward of `positions`).
BudgetTiming = Callable[[str, int, float], float]


def measure_chunk_budget(
    run_frame: Callable[[], object],
    run_prefill: Callable[[int], object],
    sync: Callable[[], None],
    cap: int,
    margin: float = 0.25,
    frame_repeats: int = 12,
    prefill_repeats: int = 5,
    timing: BudgetTiming | None = None,
) -> ChunkBudget:
    """`timing`: replaces what was measured (a test makes the device slow or fast with it;
    the forwards still run)."""
    budget_ms = FRAME_MS * (1.0 - margin)
    step_ms = median_ms(run_frame, frame_repeats, sync)
    sizes = sorted({1, max(1, cap // 16), max(1, cap // 4), cap})
    prefill_ms = {k: median_ms(partial(run_prefill, k), prefill_repeats, sync) for k in sizes}
    if timing is not None:
        step_ms = timing("frame", 1, step_ms)
        prefill_ms = {k: timing("prefill", k, ms) for k, ms in prefill_ms.items()}
    # At least one position per frame, so that a span always progresses on a slow device.
    limit = max(1, largest_k_in_budget(step_ms, prefill_ms, budget_ms, cap))
    return ChunkBudget(step_ms, prefill_ms, budget_ms, limit)


class AdaptiveChunkLimit:
    """Keeps the chunk limit in line with what the device does now.

    The start-up measurement can catch a busy moment (or a quiet one); afterwards each
    frame's model time and each injected chunk's prefill time update running estimates of
    the step time and of the per-position prefill cost, and the limit follows them.
    """

    def __init__(self, budget: ChunkBudget, cap: int, smoothing: float = 0.1) -> None:
        points = sorted(budget.prefill_ms.items())
        (k0, t0), (k1, t1) = points[0], points[-1]
        self.fixed_ms = max(0.0, t0 - (t1 - t0) / max(k1 - k0, 1) * k0)
        self.per_position_ms = max((t1 - t0) / max(k1 - k0, 1), 1e-4)
        self.step_ms = budget.step_ms
        self.budget_ms = budget.budget_ms
        self.cap = cap
        self.smoothing = smoothing

    def observe_frame(self, model_ms: float) -> None:
        self.step_ms += self.smoothing * (model_ms - self.step_ms)

    def observe_chunk(self, k: int, prefill_ms: float) -> None:
        if k >= 8:  # small chunks say little about the per-position cost
            observed = max((prefill_ms - self.fixed_ms) / k, 1e-4)
            self.per_position_ms += self.smoothing * (observed - self.per_position_ms)

    def limit(self) -> int:
        room = self.budget_ms - self.step_ms - self.fixed_ms
        return max(1, min(self.cap, int(room / self.per_position_ms)))
