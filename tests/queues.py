"""What another thread's queue holds now: read by a test once that thread has ended, or at a
point the test chose (it waits first, with tests/waiting.py, for what it expects)."""

from __future__ import annotations

import queue
from typing import Any


def drain(events: queue.SimpleQueue[Any] | queue.Queue[Any]) -> list[Any]:
    """Everything `events` holds now, in order, taken out of it; never waits."""
    taken = []
    while True:
        try:
            taken.append(events.get_nowait())
        except queue.Empty:
            return taken
