"""One conversation's row on a thread that steps many rows at once (app/row_host.py): the
speech engine (engine/local_engine.py, a `RowConversation`) and the shared recogniser
(asr/recogniser.py, a `StreamingAsr`) hold their conversations the same way, so the way is
written here once.

A row's life: `start()` asks its host to let it join at the next frame boundary; frames come
in through a bounded queue (`push_frame`; a live microphone never waits, a file's feeder
does); `finish_input()` queues the end of input, after which the host's thread steps what is
queued and frees the row; `stop()` asks it to leave now. The host's thread reads the queue
(`next_item`, through app/frame_gather.py), puts the row's events out (`emit`: to the sink
it was given with `send_events_to`, else to its own queue `events`) and marks it `ended()`.
A row that owns its host (a one-row engine or recogniser of its own) stops the host's
thread when it leaves, so the model is free for another once `join` returns True.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

import numpy as np
import numpy.typing as npt

from app.frame_gather import queue_frame
from app.frame_worker import END_OF_INPUT, EndOfInput, Frame

Event = TypeVar("Event")


class Host(Protocol):
    """What a row asks of the thread that steps it (app/row_host.py's RowHost)."""

    @property
    def running(self) -> bool: ...

    @property
    def stopped(self) -> bool: ...

    def start(self) -> None: ...

    def stop(self, timeout: float = 10.0) -> bool: ...

    def join(self, timeout: float = 10.0) -> bool: ...

    def wake(self) -> None: ...

    def request_join(self, row: Any) -> None: ...

    def request_leave(self, row: Any) -> None: ...


class FrameRow(Generic[Event]):
    # What `start()` says the second time (each kind names what it runs).
    runs_once = "a conversation's row runs once; open a new one"

    def __init__(self, host: Host, row: int, input_queue_frames: int, owns_host: bool,
                 events: queue.SimpleQueue[Event] | None = None) -> None:
        self.row = row
        self.owns_host = owns_host
        # Its own queue: where its events wait when nobody gave it a sink (a test, a
        # benchmark reading one engine alone).
        self.events: queue.SimpleQueue[Event] = (
            events if events is not None else queue.SimpleQueue())
        self._sink: Callable[[Event], None] = self.events.put
        self.ready = threading.Event()  # it joined: its frames are stepped
        self.dropped_frames = 0  # frames refused because its queue was full
        self._host = host
        self._input: queue.Queue[Frame | EndOfInput] = queue.Queue(input_queue_frames)
        self._started = False
        self._leave = threading.Event()  # asked to leave
        self._ended = threading.Event()  # left: the row is free

    # ---- any thread -------------------------------------------------------------------

    def send_events_to(self, sink: Callable[[Event], None]) -> None:
        """Its events go to `sink` instead of its own queue (the pipeline's router); given
        before `start`, so none is put anywhere else."""
        self._sink = sink

    @property
    def started(self) -> bool:
        return self._started

    @property
    def running(self) -> bool:
        return self._started and not self._ended.is_set()

    def start(self) -> None:
        if self._started:
            raise RuntimeError(self.runs_once)
        self._started = True
        if self.owns_host and not self._host.running:
            self._host.start()
        self._host.request_join(self)

    def push_frame(self, pcm: npt.NDArray[np.float32], timeout: float | None = 0.0) -> bool:
        """Queue one 1920-sample frame. With timeout 0 (live audio) a full queue drops the
        frame and counts it; a file's feeder passes a timeout and waits for room."""
        if not queue_frame(self._input, pcm, timeout):
            self.dropped_frames += 1
            return False
        self._host.wake()
        return True

    def room(self) -> int:
        """Frames its queue takes now without waiting: a caller that paces itself by it
        (a server's connection) never has a frame refused, so nothing is counted dropped."""
        return max(0, self._input.maxsize - self._input.qsize())

    def finish_input(self, timeout: float | None = 10.0) -> None:
        """No more frames: the row leaves once its queued frames are stepped. Waits for
        room while it lives; raises queue.Full only when `timeout` passes with the row
        alive and its queue full."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                self._input.put(END_OF_INPUT, timeout=0.2)
                self._host.wake()
                return
            except queue.Full:
                if self._gone:
                    return  # nobody will read it
                if deadline is not None and time.monotonic() > deadline:
                    raise

    def stop(self, timeout: float = 10.0) -> bool:
        """Leave now (queued frames are dropped) and wait. True once the row is free (and,
        for a row that owns its host, the host's thread has ended)."""
        self._leave.set()
        self._host.request_leave(self)
        if self.owns_host:
            self._host.stop(0.0)  # nobody else joins it: its thread ends after this row
        return self.join(timeout)

    def join(self, timeout: float = 10.0) -> bool:
        if not self._started and not self._leave.is_set():
            return True
        deadline = time.monotonic() + timeout
        if not self._ended.wait(timeout):
            return False
        if self.owns_host:
            return self._host.join(max(0.0, deadline - time.monotonic()))
        return True

    @property
    def _gone(self) -> bool:
        """Asked to leave, left, or its host has stopped: nothing more is stepped."""
        return self._leave.is_set() or self._ended.is_set() or self._host.stopped

    # ---- the host's thread ------------------------------------------------------------

    @property
    def leaving(self) -> bool:
        return self._leave.is_set()

    def next_item(self) -> Frame | EndOfInput | None:
        """The next frame or END_OF_INPUT, or None when none is queued."""
        try:
            return self._input.get_nowait()
        except queue.Empty:
            return None

    def emit(self, event: Event) -> None:
        self._sink(event)

    def ended(self) -> None:
        self._ended.set()
