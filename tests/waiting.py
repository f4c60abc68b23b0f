"""One way for a test to wait on another thread: poll a condition, with a timeout.

Tests wait for threads they do not own (audio callbacks, the engine, a server); a condition
polled at a short interval reads the same on any machine, and the timeout turns a hang into
a failure that says what never happened.
"""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(condition: Callable[[], object], timeout: float, *, interval: float = 0.01,
               message: str | Callable[[], str] = "") -> None:
    """Return as soon as `condition()` is true; raise AssertionError after `timeout` s.

    The last read always starts after the deadline, so a machine that stalled during the
    wait does not fail a condition that came true meanwhile.
    `message` (or a callable, for a message that reads the state at the failure) says what
    never happened.
    """
    deadline = time.monotonic() + timeout
    while True:
        expired = time.monotonic() >= deadline
        if condition():
            return
        if expired:
            text = message() if callable(message) else message
            raise AssertionError(text or f"not true within {timeout} s")
        time.sleep(interval)
