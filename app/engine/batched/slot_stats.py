"""Per-slot figures the server publishes: frames, late frames, frame time p50/p99, spans.

A slot's frame time is the time of the batched tick it took part in (its own injection,
every participant's Mimi work and the ONE batched step): what that conversation waited for
its frame. Written by the engine thread, read from any thread (a lock guards the window).
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass

import numpy as np

from app.frames import FRAME_MS

WINDOW_FRAMES = 750  # the last minute of frames


@dataclass(frozen=True)
class SlotStats:
    row: int
    frames: int
    late_frames: int  # frames whose tick took longer than one frame
    frame_ms_p50: float | None
    frame_ms_p99: float | None
    spans_landed: int
    dropped_frames: int


class SlotCounters:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._window: deque[float] = deque(maxlen=WINDOW_FRAMES)
        self.frames = 0
        self.late_frames = 0
        self.spans_landed = 0

    def frame(self, frame_ms: float) -> None:
        with self._lock:
            self._window.append(frame_ms)
            self.frames += 1
            self.late_frames += frame_ms > FRAME_MS

    def span_landed(self) -> None:
        with self._lock:
            self.spans_landed += 1

    def snapshot(self, row: int, dropped_frames: int) -> SlotStats:
        with self._lock:
            times = np.asarray(self._window, dtype=np.float64)
            frames, late, spans = self.frames, self.late_frames, self.spans_landed
        p50 = float(np.percentile(times, 50)) if times.size else None
        p99 = float(np.percentile(times, 99)) if times.size else None
        return SlotStats(row, frames, late, p50, p99, spans, dropped_frames)
