"""The chunk budget: how many span positions fit in one 80 ms frame (fake clock, no sleeps)."""

from __future__ import annotations

import types

import pytest

from app.engine import frame_budget
from app.engine.frame_budget import largest_k_in_budget, measure_chunk_budget
from app.frames import FRAME_MS

PREFILL = {1: 1.0, 64: 5.0, 256: 20.0}


# --- largest_k_in_budget -------------------------------------------------------------


@pytest.mark.parametrize(
    ("budget_ms", "expected"),
    [
        # step 20 + prefill: 21 ms at K=1, 25 at K=64, then 15/192 ms a position to 256.
        (60.0, 256),  # everything measured fits
        (35.0, 192),  # 25 + (192 - 64) * 15/192 = 35
        (30.0, 128),  # 25 + 64 * 15/192 = 30
        (25.0, 64),
        (23.0, 32),  # 21 + (K - 1) * 4/63 <= 23  ->  K <= 32.5
        (21.0, 1),
    ],
)
def test_largest_k_interpolates_between_measured_sizes(budget_ms: float, expected: int):
    assert largest_k_in_budget(20.0, PREFILL, budget_ms, cap=1024) == expected


def test_largest_k_is_zero_when_not_even_one_position_fits():
    assert largest_k_in_budget(20.0, PREFILL, 20.9, cap=1024) == 0
    assert largest_k_in_budget(90.0, PREFILL, 60.0, cap=1024) == 0


def test_largest_k_is_capped():
    assert largest_k_in_budget(20.0, PREFILL, 60.0, cap=100) == 100
    assert largest_k_in_budget(20.0, PREFILL, 30.0, cap=100) == 100
    assert largest_k_in_budget(20.0, PREFILL, 30.0, cap=129) == 128


def test_largest_k_does_not_extrapolate_beyond_the_largest_measured_size():
    assert largest_k_in_budget(1.0, PREFILL, 1000.0, cap=10_000) == 256


def test_largest_k_with_a_single_measurement():
    assert largest_k_in_budget(20.0, {8: 10.0}, 30.0, cap=64) == 8
    assert largest_k_in_budget(20.0, {8: 10.0}, 29.0, cap=64) == 0


def test_largest_k_grows_with_the_budget():
    ks = [largest_k_in_budget(20.0, PREFILL, b / 2, cap=1024) for b in range(40, 130)]
    assert ks == sorted(ks)


# --- measure_chunk_budget with a fake clock ----------------------------------------


class FakeClock:
    """perf_counter() for frame_budget, advanced only by the fake workloads."""

    def __init__(self) -> None:
        self.now = 1000.0  # seconds
        self.reads = 0

    def perf_counter(self) -> float:
        self.reads += 1
        return self.now

    def advance_ms(self, ms: float) -> None:
        self.now += ms / 1000.0


@pytest.fixture()
def clock(monkeypatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(frame_budget, "time", types.SimpleNamespace(perf_counter=fake.perf_counter))
    return fake


def test_measure_finds_the_chunk_limit_on_a_linear_device(clock: FakeClock):
    prefill_sizes: list[int] = []

    def run_frame():
        clock.advance_ms(20.0)

    def run_prefill(k: int):
        prefill_sizes.append(k)
        clock.advance_ms(0.3 + 0.25 * k)

    result = measure_chunk_budget(run_frame, run_prefill, sync=lambda: None, cap=256)

    assert result.budget_ms == pytest.approx(FRAME_MS * 0.75)
    assert result.step_ms == pytest.approx(20.0)
    assert set(result.prefill_ms) == {1, 16, 64, 256}
    for k, ms in result.prefill_ms.items():
        assert ms == pytest.approx(0.3 + 0.25 * k)
    # 20 + 0.3 + 0.25 K <= 60  ->  K <= 158.8
    assert result.chunk_limit == 158
    assert set(prefill_sizes) == {1, 16, 64, 256}
    assert clock.reads > 0  # the fake clock really was the one used


def test_measure_respects_the_margin(clock: FakeClock):
    result = measure_chunk_budget(
        lambda: clock.advance_ms(20.0),
        lambda k: clock.advance_ms(0.3 + 0.25 * k),
        sync=lambda: None,
        cap=256,
        margin=0.5,
    )
    assert result.budget_ms == pytest.approx(40.0)
    # 20.3 + 0.25 K <= 40  ->  K <= 78.8
    assert result.chunk_limit == 78


def test_measure_is_capped(clock: FakeClock):
    result = measure_chunk_budget(
        lambda: clock.advance_ms(1.0),
        lambda k: clock.advance_ms(0.01 * k),
        sync=lambda: None,
        cap=64,
    )
    assert result.chunk_limit == 64
    assert max(result.prefill_ms) == 64


def test_measure_counts_time_spent_waiting_for_the_device(clock: FakeClock):
    # An asynchronous device returns at once; the work is only finished at sync().
    pending = {"ms": 0.0}

    def sync():
        clock.advance_ms(pending["ms"])
        pending["ms"] = 0.0

    def run_frame():
        pending["ms"] = 20.0

    def run_prefill(k: int):
        pending["ms"] = 0.3 + 0.25 * k

    result = measure_chunk_budget(run_frame, run_prefill, sync=sync, cap=256)
    assert result.step_ms == pytest.approx(20.0)
    assert result.chunk_limit == 158


def test_measure_uses_the_median_so_a_slow_warm_up_does_not_count(clock: FakeClock):
    frame_times = iter([500.0] + [20.0] * 100)
    prefill_calls = {"n": 0}

    def run_prefill(k: int):
        prefill_calls["n"] += 1
        first_of_size = prefill_calls["n"] % 5 == 1
        clock.advance_ms(400.0 if first_of_size else 0.3 + 0.25 * k)

    result = measure_chunk_budget(
        lambda: clock.advance_ms(next(frame_times)), run_prefill, sync=lambda: None, cap=256
    )
    assert result.step_ms == pytest.approx(20.0)
    assert result.chunk_limit == 158


def test_a_slow_device_still_gets_one_position_per_frame(clock: FakeClock):
    result = measure_chunk_budget(
        lambda: clock.advance_ms(75.0),
        lambda k: clock.advance_ms(5.0 + k),
        sync=lambda: None,
        cap=256,
    )
    assert largest_k_in_budget(result.step_ms, result.prefill_ms, result.budget_ms, 256) == 0
    assert result.chunk_limit == 1


def test_the_adaptive_limit_follows_a_slower_device_and_recovers():
    from app.engine.frame_budget import AdaptiveChunkLimit, ChunkBudget

    budget = ChunkBudget(step_ms=15.0, prefill_ms={1: 2.0, 256: 10.0}, budget_ms=60.0,
                         chunk_limit=256)
    adaptive = AdaptiveChunkLimit(budget, cap=256, smoothing=0.5)
    assert adaptive.limit() == 256
    for _ in range(20):  # the machine got busy: frames take 55 ms
        adaptive.observe_frame(55.0)
    busy = adaptive.limit()
    assert 1 <= busy < 256
    for _ in range(20):  # and quiet again
        adaptive.observe_frame(15.0)
    assert adaptive.limit() == 256
    for _ in range(20):  # prefill got slower per position: fewer positions fit
        adaptive.observe_chunk(200, 200 * 0.4)
    assert adaptive.limit() < 256
