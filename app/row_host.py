"""The thread that steps many conversations' rows at once, written once for the speech engine
(engine/local_engine.py) and the shared recogniser (asr/recogniser.py).

A host has a fixed number of rows. A conversation (a `FrameRow`: frame_row.py) holds a row
from `open` to its end; it asks to join (`request_join`) and the host's thread admits it at
the next frame boundary, steps every live row that has a frame in ONE batched call per tick
(frame_gather.py), and frees its row when it leaves, when its input ends, or when it fails.
The model's own work is the subclass's, through a few hooks: `_serving` (the model
streaming, warmed up), `_admit` (a row's start), `_step` (one batched tick),
`_end_of_input`, `_farewell` (what a row is told when it leaves) and `_error_event`.

A failure says why, at once, to everyone (vLLM keeps its scheduler apart from its
executors; here the host is that scheduler):
- the thread failing, at start or mid-conversation, records the reason (`failure`: the
  exception's type and message), logs it with its traceback, tells every held row (an
  error event, then its farewell) and sets `finished`; every waiter (`wait_ready`, `open`)
  ends with that reason instead of a timeout;
- a tick that makes no progress for `stall_s` (a hung step) is a failure too: a watchdog
  thread gives the rows their error and frees them, and marks the host failed. The hung
  thread cannot be interrupted from Python; whoever supervises the host replaces the
  process (app/server/engine_host.py says how a server does).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Generic, TypeVar

from app.frame_gather import FrameGather
from app.frame_row import FrameRow
from app.frame_worker import END_OF_INPUT
from app.thread_owner import ThreadOwner

log = logging.getLogger(__name__)

Row = TypeVar("Row", bound=FrameRow[Any])

WATCH_INTERVAL_S = 0.1  # how often the watchdog looks at the tick in progress
# A host whose model another host still streams (the last conversation's, winding down: eval's
# samples, a restart) waits this long for it, then fails saying so.
MODEL_BUSY_WAIT_S = 60.0


class HostFailedError(RuntimeError):
    """The host cannot take a conversation: it failed (the message says why) or stopped."""


class StallError(RuntimeError):
    """A tick made no progress for longer than the host allows."""


class RowHost(ThreadOwner, Generic[Row]):
    # How the host names itself in messages and logs ("the speech engine").
    what = "the row host"

    def __init__(self, thread_name: str, rows: int, gather_ms: float, stall_s: float) -> None:
        """`rows`: conversations at once. `gather_ms`: how long a tick waits, once one row
        has a frame, for the other talking rows' frames. `stall_s`: a tick that takes
        longer is a failure (the watchdog's limit)."""
        if rows < 1:
            raise ValueError(f"{self.what} needs at least one row")
        super().__init__(thread_name)
        self.row_count = rows
        self.stall_s = stall_s
        self._rows: list[Row | None] = [None] * rows  # a conversation holds its row
        self._lock = threading.Lock()
        self._joining: queue.SimpleQueue[Row] = queue.SimpleQueue()
        self._live: list[Row] = []
        self._wake_up = threading.Event()  # a frame, a join or a leave to look at
        self._gather = FrameGather(self._wake_up, gather_ms / 1000.0)
        self.ready = threading.Event()  # warmed up: conversations join from now on
        self.finished = threading.Event()  # its thread has ended (failed, or stopped)
        self._settled = threading.Event()  # ready, failed or stopped: waiters may look
        self.failure: str | None = None  # why it failed ("TypeName: message")
        self.ticks = 0  # batched steps run for conversations (tests and benchmarks)
        self._busy_since: float | None = None  # the tick in progress began (monotonic)

    # ---- any thread ---------------------------------------------------------------------

    def _wake(self) -> None:  # stopping: every conversation ends ("stopped")
        self.wake()

    def wake(self) -> None:
        """A frame came, or a conversation wants to join or leave: look now."""
        self._wake_up.set()

    @property
    def stopped(self) -> bool:
        return self._stop.is_set() or (self._thread is not None and not self._thread.is_alive())

    @property
    def free_rows(self) -> int:
        """Rows no conversation holds: what a server can still take."""
        with self._lock:
            return sum(holder is None for holder in self._rows)

    def conversations(self) -> list[Row | None]:
        """Each row's conversation (None: free), in row order."""
        with self._lock:
            return list(self._rows)

    def wait_ready(self, timeout: float) -> None:
        """Block until the host takes conversations; HostFailedError at once if it failed
        or stopped (with the reason), or once `timeout` passed."""
        if not self._settled.wait(timeout):
            raise HostFailedError(f"{self.what} was not ready after {timeout:g} s")
        self.check_running()

    def check_running(self) -> None:
        """HostFailedError (why) unless the host is ready and running."""
        if self.failure is not None:
            raise HostFailedError(f"{self.what} failed: {self.failure}")
        if self.stopped:
            raise HostFailedError(f"{self.what} has stopped")
        if not self.ready.is_set():
            raise HostFailedError(f"{self.what} is not ready yet")

    def _hold(self, build: Callable[[int], Row]) -> Row | None:
        """A conversation built on the first free row (None when every row is held). A
        host that failed or stopped refuses with the reason."""
        if self.failure is not None:
            raise HostFailedError(f"{self.what} failed: {self.failure}")
        if self.stopped:
            raise HostFailedError(f"{self.what} has stopped")
        with self._lock:
            row = next((r for r, holder in enumerate(self._rows) if holder is None), None)
            if row is None:
                return None
            conversation = build(row)
            self._rows[row] = conversation
        return conversation

    def hold(self, row: int, conversation: Row) -> None:
        """`conversation` takes the free row `row` (one with a host of its own)."""
        with self._lock:
            if self._rows[row] is not None:
                raise RuntimeError(f"row {row} of {self.what} is held")
            self._rows[row] = conversation

    def request_join(self, conversation: Row) -> None:
        self._joining.put(conversation)
        self.wake()

    def request_leave(self, conversation: Row) -> None:
        if not conversation.started:  # never started: nothing on the host's thread holds it
            self._free(conversation, "stopped")
        self.wake()

    # ---- the host's thread ----------------------------------------------------------------

    def _run(self) -> None:
        watch = threading.Thread(target=self._watch, name=f"{self._thread_name}-watchdog",
                                 daemon=True)
        watch.start()
        try:
            with self._serving():
                self.ready.set()
                self._settled.set()
                while not self._stop.is_set():
                    self._tick()
        except Exception as exc:  # the thread must never die silently
            self._failed(f"{type(exc).__name__}: {exc}", exc)
        finally:
            self._stop.set()
            self._busy_since = None
            for conversation in self._held():
                self._free(conversation, "stopped")
            self._settled.set()
            self.finished.set()

    @contextmanager
    def _model_to_itself(self, lock: threading.Lock) -> Iterator[None]:
        """A loaded model's modules keep one stream's state in themselves: one host streams
        them at a time; this one waits (bounded) for the last to let them go."""
        if not lock.acquire(timeout=MODEL_BUSY_WAIT_S):
            raise RuntimeError(f"its model was still in use by another conversation after "
                               f"{MODEL_BUSY_WAIT_S:g} s")
        try:
            yield
        finally:
            lock.release()

    def _serving(self) -> AbstractContextManager[None]:
        """The model streaming all its rows, warmed up, while open (the thread's life)."""
        raise NotImplementedError

    def _failed(self, reason: str, exc: BaseException | None = None) -> None:
        """The host is done for: every held row is told why and freed."""
        if self.failure is None:
            self.failure = reason
            log.error("%s failed: %s", self.what, reason, exc_info=exc)
        self._stop.set()
        for conversation in self._held():
            conversation.emit(self._error_event(f"{self.what} failed: {reason}"))
            self._free(conversation, "error")
        self._settled.set()

    def _watch(self) -> None:
        """The watchdog: a tick in progress for longer than `stall_s` fails the host."""
        while not self.finished.wait(WATCH_INTERVAL_S):
            since = self._busy_since
            if since is None:
                continue
            stalled = time.monotonic() - since
            if stalled > self.stall_s:
                self._failed(f"StallError: a step made no progress for {stalled:.1f} s "
                             f"(the limit is {self.stall_s:g} s); the device may be hung")
                return

    def _held(self) -> list[Row]:
        with self._lock:
            return [holder for holder in self._rows if holder is not None]

    def _free(self, conversation: Row, reason: str) -> None:
        """The row is free again; the conversation is told (its farewell) and ended."""
        with self._lock:
            if self._rows[conversation.row] is not conversation:
                return  # already freed
            self._rows[conversation.row] = None
        if threading.current_thread() is self._thread:  # the thread's own lists
            if conversation in self._live:
                self._live.remove(conversation)
            self._gather.forget(conversation.row)
            self._forget(conversation)
        self._farewell(conversation, reason)
        conversation.ended()
        if conversation.owns_host:  # nobody else will ever join this host
            self._stop.set()

    def _fail(self, conversation: Row, exc: Exception) -> None:
        """One conversation's error: it alone ends."""
        log.exception("%s: the conversation on row %d failed", self.what, conversation.row)
        conversation.emit(self._error_event(f"{type(exc).__name__}: {exc}"))
        self._free(conversation, "error")

    def _boundary(self) -> None:
        """Between two frames: conversations that asked to leave leave; new ones join."""
        for conversation in self._leaving():
            self._free(conversation, "stopped")
        while True:
            try:
                conversation = self._joining.get_nowait()
            except queue.Empty:
                return
            if conversation.leaving:
                self._free(conversation, "stopped")
                continue
            try:
                self._admit(conversation)
            except Exception as exc:  # its start failed (a missing voice): it alone ends
                self._fail(conversation, exc)

    def _leaving(self) -> list[Row]:
        """The conversations on the host's thread that asked to leave."""
        return [c for c in self._live if c.leaving]

    def _go_live(self, conversation: Row) -> None:
        """The conversation's frames are stepped from the next tick on."""
        self._live.append(conversation)
        self._gather.joined(conversation.row)
        conversation.ready.set()

    def _tick(self) -> None:
        self._busy_since = time.monotonic()
        try:
            self._boundary()
        finally:
            self._busy_since = None
        frames: list[tuple[Row, object]] = []
        for conversation, item in self._gather.next_tick(self._live, self._joining, self._stop,
                                                         self._more_to_do):
            if item is END_OF_INPUT:
                try:
                    self._end_of_input(conversation)
                except Exception as exc:
                    self._fail(conversation, exc)
                    continue
                self._free(conversation, "end of input")
            else:
                frames.append((conversation, item))
        self._busy_since = time.monotonic()
        try:
            self._step(frames)
        finally:
            self._busy_since = None

    def _more_to_do(self) -> bool:
        """Work of the host's own that a tick does without frames (a start in pieces)."""
        return False

    # ---- the subclass's part ------------------------------------------------------------------

    def _admit(self, conversation: Row) -> None:
        """The conversation's row starts (reset, its start); `_go_live` once it is in."""
        raise NotImplementedError

    def _step(self, frames: Sequence[tuple[Row, object]]) -> None:
        """One tick's work: the frames of the live rows that had one (maybe none)."""
        raise NotImplementedError

    def _end_of_input(self, conversation: Row) -> None:
        """The conversation's input ended; its row is freed after this."""

    def _farewell(self, conversation: Row, reason: str) -> None:
        """What a leaving conversation is told (reason: stopped, end of input, error)."""

    def _forget(self, conversation: Row) -> None:
        """The host's own per-row bookkeeping of a freed conversation (its thread)."""

    def _error_event(self, message: str) -> object:
        raise NotImplementedError
