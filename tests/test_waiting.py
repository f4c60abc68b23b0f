"""The tests' one polling helper: it returns once the condition holds and fails, naming what
never happened, once the timeout has passed."""

from __future__ import annotations

import time

import pytest

from tests.waiting import wait_until


def test_it_returns_as_soon_as_the_condition_holds() -> None:
    calls: list[int] = []

    def third_time() -> bool:
        calls.append(1)
        return len(calls) >= 3

    wait_until(third_time, timeout=10.0, interval=0.001)
    assert len(calls) == 3  # polled until true, then no more


def test_a_condition_that_never_holds_fails_with_its_message() -> None:
    with pytest.raises(AssertionError, match="the frames never came"):
        wait_until(lambda: False, timeout=0.05, interval=0.001, message="the frames never came")
    state = {"frames": 2}
    with pytest.raises(AssertionError, match="only 2 frames"):
        wait_until(lambda: False, timeout=0.05, interval=0.001,
                   message=lambda: f"only {state['frames']} frames")


def test_the_condition_is_read_again_after_the_deadline() -> None:
    """A machine that stalls past the deadline while the condition is read gets one more
    look: true by then is a pass, not a timeout."""
    calls: list[int] = []

    def stalls_then_holds() -> bool:
        calls.append(1)
        if len(calls) == 1:
            time.sleep(0.1)  # past the 0.05 s deadline, still false
            return False
        return True

    wait_until(stalls_then_holds, timeout=0.05, interval=0.001)
    assert len(calls) == 2
