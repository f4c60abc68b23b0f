"""Faults put into a real engine's step, and waiting for a conversation's events: for the
tests of what a failing engine does (issue 33)."""

from __future__ import annotations

import queue
import threading
import time

WAIT_S = 60.0  # generous: the shared machine may be slow; the failures come in seconds


class StepFault:
    """The runtime's step, failing from its `at`-th call of a conversation on (the warm-up's
    steps are not counted unless `warm_up`): raising `error`, or hanging until `release`."""

    def __init__(self, engine, at: int, error: BaseException | None,
                 warm_up: bool = False) -> None:
        self.engine = engine
        self.at = at
        self.error = error
        self.warm_up = warm_up
        self.calls = 0
        self.release = threading.Event()
        self.hanging = threading.Event()
        self._step = engine.runtime.step
        engine.runtime.step = self  # type: ignore[method-assign]

    def __call__(self, rows, columns):
        if self.warm_up or self.engine.ready.is_set():
            self.calls += 1
            if self.calls >= self.at:
                if self.error is not None:
                    raise self.error
                self.hanging.set()
                self.release.wait(WAIT_S)
        return self._step(rows, columns)


def events_until(events: queue.SimpleQueue, kind: type, timeout: float = WAIT_S) -> list:
    seen: list = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            event = events.get(timeout=0.1)
        except queue.Empty:
            continue
        seen.append(event)
        if isinstance(event, kind):
            return seen
    raise AssertionError(f"no {kind.__name__} within {timeout} s: {seen[-5:]}")
