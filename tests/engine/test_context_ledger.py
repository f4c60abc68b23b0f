"""The context ledger: frames and span positions in the temporal transformer's window."""

from __future__ import annotations

import random

import pytest

from app.engine.context_ledger import ContextLedger


def test_a_new_ledger_is_empty():
    usage = ContextLedger(window=100).usage()
    assert usage.window == 100
    assert usage.used == 0
    assert usage.frame_positions == 0
    assert usage.span_positions == 0
    assert usage.span_positions_in_window == 0
    assert usage.wrapped is False


def test_frames_and_span_positions_are_counted_separately():
    ledger = ContextLedger(window=1000)
    ledger.add_frames()
    ledger.add_frames(9)
    ledger.add_span_positions(25)
    ledger.add_frames(5)
    ledger.add_span_positions(3)
    usage = ledger.usage()
    assert usage.frame_positions == 15
    assert usage.span_positions == 28
    assert usage.span_positions_in_window == 28
    assert usage.used == 43
    assert ledger.total == 43
    assert usage.wrapped is False


def test_span_positions_leave_the_window_one_frame_at_a_time():
    window = 100
    ledger = ContextLedger(window)
    ledger.add_frames(10)
    ledger.add_span_positions(20)  # positions 10..29
    assert ledger.span_positions_in_window() == 20
    ledger.add_frames(70)  # total 100: the window is exactly full
    assert ledger.span_positions_in_window() == 20
    ledger.add_frames(10)  # total 110: the first 10 frames left, the window covers 10..109
    assert ledger.span_positions_in_window() == 20
    for gone in range(1, 21):
        ledger.add_frames(1)
        assert ledger.span_positions_in_window() == 20 - gone
    assert ledger.usage().span_positions_in_window == 0
    ledger.add_frames(500)
    assert ledger.span_positions_in_window() == 0
    # The lifetime total is not forgotten.
    assert ledger.usage().span_positions == 20


def test_older_spans_leave_before_newer_ones():
    ledger = ContextLedger(window=50)
    ledger.add_span_positions(10)  # positions 0..9
    ledger.add_frames(10)
    ledger.add_span_positions(5)  # positions 20..24
    ledger.add_frames(35)  # total 60: window covers 10..59
    usage = ledger.usage()
    assert usage.span_positions_in_window == 5
    ledger.add_frames(20)  # window covers 30..79
    assert ledger.usage().span_positions_in_window == 0


def test_wrapped_flips_only_once_the_total_exceeds_the_window():
    ledger = ContextLedger(window=30)
    ledger.add_frames(20)
    ledger.add_span_positions(10)
    assert ledger.total == 30
    assert ledger.usage().wrapped is False
    assert ledger.usage().used == 30
    ledger.add_frames(1)
    assert ledger.usage().wrapped is True
    assert ledger.usage().used == 30


def test_a_span_longer_than_the_window_fills_it():
    ledger = ContextLedger(window=64)
    ledger.add_span_positions(200)
    usage = ledger.usage()
    assert usage.used == 64
    assert usage.span_positions_in_window == 64
    assert usage.wrapped is True
    ledger.add_frames(10)
    assert ledger.usage().span_positions_in_window == 54


@pytest.mark.parametrize("seed", range(5))
def test_random_sequences_match_a_position_by_position_model(seed: int):
    rng = random.Random(seed)
    window = rng.choice([8, 50, 375])
    ledger = ContextLedger(window)
    positions: list[str] = []  # the kind of every position ever added, in order
    for _ in range(300):
        if rng.random() < 0.8:
            n = rng.randint(1, 3)
            ledger.add_frames(n)
            positions += ["frame"] * n
        else:
            n = rng.randint(1, 2 * window)
            ledger.add_span_positions(n)
            positions += ["span"] * n
        usage = ledger.usage()
        in_window = positions[-window:]
        assert usage.used == len(in_window) <= window
        assert usage.frame_positions == positions.count("frame")
        assert usage.span_positions == positions.count("span")
        assert usage.span_positions_in_window == in_window.count("span")
        assert usage.wrapped == (len(positions) > window)
