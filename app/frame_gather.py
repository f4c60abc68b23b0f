"""One frame from each row that has one, for a step that serves many rows at once.

The speech engine (engine/local_engine.py) and the shared recogniser (asr/recogniser.py)
step every row that has a frame in ONE batched call. Frames of different conversations do
not arrive together, so once one row has a frame the gather waits a little (`gather_s`) for
the rows that talked in the last tick; a row that did not (a slow client, a silent one) is
not waited for: it costs the others nothing.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

import numpy as np
import numpy.typing as npt

from app.frame_worker import EndOfInput, Frame
from app.frames import FRAME_SAMPLES


def queue_frame(frames: queue.Queue[Frame | EndOfInput], pcm: npt.NDArray[np.float32],
                timeout: float | None) -> bool:
    """One 1920-sample frame into a row's queue, as float32. With timeout 0 (live audio) a
    full queue refuses it at once; a file's feeder passes a timeout and waits for room.
    False when it was refused (the row counts it as dropped)."""
    if pcm.shape != (FRAME_SAMPLES,):
        raise ValueError(f"a frame is {FRAME_SAMPLES} samples, got shape {pcm.shape}")
    frame = np.asarray(pcm, dtype=np.float32)
    try:
        if timeout == 0:
            frames.put_nowait(frame)
        else:
            frames.put(frame, timeout=timeout)
    except queue.Full:
        return False
    return True


class FrameSource(Protocol):
    """A row's queue of frames, as the gather reads it (the engine's thread only)."""

    @property
    def row(self) -> int: ...

    @property
    def leaving(self) -> bool: ...

    def next_item(self) -> object | None:
        """The next frame (or end-of-input marker), None when none is queued."""
        ...


Source = TypeVar("Source", bound=FrameSource)


class FrameGather:
    def __init__(self, wake: threading.Event, gather_s: float) -> None:
        """`wake` is set by whoever queues a frame, or has a row to join or leave."""
        self._wake = wake
        self.gather_s = gather_s
        self._held: dict[int, object] = {}  # row -> the item taken for the next tick
        self._talking: set[int] = set()  # rows that had a frame in the last tick

    def forget(self, row: int) -> None:
        """The row left: an item taken for it is dropped."""
        self._held.pop(row, None)
        self._talking.discard(row)

    def joined(self, row: int) -> None:
        """A row that joins is waited for in its first tick."""
        self._talking.add(row)

    def next_tick(self, live: Sequence[Source], joining: queue.SimpleQueue[Source],
                  stop: threading.Event, busy: Callable[[], bool] = lambda: False
                  ) -> list[tuple[Source, object]]:
        """The items of the next tick (`take`), returned early when a row waits in
        `joining`, one of `live` asks to leave (the caller's frame boundary comes first) or
        `busy()` says the caller has work of its own without frames (a start in pieces).
        With no live row it waits up to 50 ms for one to join (not when busy) and returns
        nothing."""
        if not live:
            if not busy():
                self._wake.wait(0.05)
                self._wake.clear()
            return []
        return self.take(live, stop, lambda: (not joining.empty() or busy()
                                              or any(s.leaving for s in live)))

    def take(self, live: Sequence[Source], stop: threading.Event,
             something_else: Callable[[], bool]) -> list[tuple[Source, object]]:
        """One item from every live source that has one, in row order. Returns early
        (maybe with nothing) when `stop` is set or `something_else()` says a row waits to
        join or leave."""
        deadline: float | None = None
        while True:
            self._wake.clear()
            for source in live:
                if source.row not in self._held:
                    item = source.next_item()
                    if item is not None:
                        self._held[source.row] = item
            missing = [s for s in live if s.row not in self._held
                       and s.row in self._talking and not s.leaving]
            if self._held and deadline is None:
                deadline = time.monotonic() + self.gather_s
            if stop.is_set() or (self._held and (
                    not missing or time.monotonic() >= (deadline or 0.0))):
                break
            if not self._held:
                if something_else():
                    break
                self._wake.wait(0.05)
                continue
            self._wake.wait(max(0.0, (deadline or 0.0) - time.monotonic()))
        taken = [(s, self._held.pop(s.row)) for s in sorted(live, key=lambda s: s.row)
                 if s.row in self._held]
        self._talking = {s.row for s, _item in taken}
        return taken
