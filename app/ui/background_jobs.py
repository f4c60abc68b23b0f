"""Slow work a window or settings tab starts (a connection test, listing voices, a test tone,
the memory plan, reading the saved conversations) runs on a thread of its own; its result
comes back to the GUI thread.

A result that arrives after what it was about has changed (another host, another model) is
dropped, so the dialog never shows an answer to a question the user no longer asks: each
kind of job has a number, raised by every new job of that kind and by `drop`, and only the
result of the job that holds the current number is delivered.

A job's thread touches no Qt object: its result goes into a queue that ONE relay, living on
the GUI thread for the whole run, empties on a timer while jobs are out, addressed to the
tab's jobs by a weak reference (a tab closed by then gets nothing); the job's function, which
may hold the tab, is handed back with the result so that its last reference goes on the GUI
thread. Three earlier forms crashed the suite with segfaults: a per-tab signal object freed
on the pool's thread, QThreadPool.start(callable), and Qt signals emitted from Python
threads.
"""

from __future__ import annotations

import queue
import threading
import weakref
from collections.abc import Callable, Mapping
from typing import Any

import shiboken6
from PySide6.QtCore import QObject, QTimer


class _Relay(QObject):
    """Brings every job's result to the GUI thread; made there once, never freed. The jobs'
    threads touch no Qt object at all: they put their result in a queue, and a timer on the
    GUI thread takes it out while jobs are out."""

    POLL_MS = 25

    def __init__(self) -> None:
        super().__init__()
        self._results: queue.SimpleQueue[_Result] = queue.SimpleQueue()
        self._outstanding = 0
        self._timer = QTimer(self)
        self._timer.setInterval(self.POLL_MS)
        self._timer.timeout.connect(self._deliver)

    def started(self) -> None:
        """A job began (GUI thread)."""
        self._outstanding += 1
        if not self._timer.isActive():
            self._timer.start()

    def outstanding(self) -> int:
        return self._outstanding

    def finished(self, result: _Result) -> None:
        """A job's result (any thread)."""
        self._results.put(result)

    def _deliver(self) -> None:
        while True:
            try:
                jobs_ref, kind, number, value, spent = self._results.get_nowait()
            except queue.Empty:
                break
            self._outstanding -= 1
            spent.clear()  # the job's function (and what it holds) goes here, on this thread
            jobs = jobs_ref()
            if jobs is not None and shiboken6.isValid(jobs):
                jobs.deliver(kind, number, value)
        if self._outstanding <= 0:
            self._timer.stop()


# (the tab's jobs, kind, number, result value or exception, the spent function's holder)
_Result = tuple["weakref.ref[BackgroundJobs]", str, int, object, list[Callable[[], Any]]]
_relay: _Relay | None = None


def jobs_out() -> int:
    """How many jobs have not had their result taken on the GUI thread yet (all tabs)."""
    return 0 if _relay is None else _relay.outstanding()


def _the_relay() -> _Relay:
    """The relay, made on the first job (on the GUI thread, where jobs are started)."""
    global _relay
    if _relay is None:
        _relay = _Relay()
    return _relay


class BackgroundJobs(QObject):
    """The jobs of one tab; `handlers` takes each kind's result (a value or the exception
    the job raised) on the GUI thread."""

    def __init__(self, handlers: Mapping[str, Callable[[object], None]],
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._handlers = dict(handlers)
        self._numbers = dict.fromkeys(self._handlers, 0)

    def start(self, kind: str, fn: Callable[[], Any]) -> int:
        """Run `fn` on a thread of its own; returns the job's number (see `is_current`)."""
        self._numbers[kind] += 1
        number = self._numbers[kind]
        relay, jobs_ref = _the_relay(), weakref.ref(self)
        holder = [fn]  # emptied on the GUI thread once the result is there
        del fn

        def job() -> None:
            try:
                result: object = holder[0]()
            except Exception as exc:  # shown to the user, never raised in a job's thread
                result = exc
            relay.finished((jobs_ref, kind, number, result, holder))

        relay.started()

        threading.Thread(target=job, name=f"settings-{kind}", daemon=True).start()
        return number

    def drop(self, kind: str) -> None:
        """The question changed: the running job's result, if any, will not be delivered."""
        self._numbers[kind] += 1

    def is_current(self, kind: str, number: int) -> bool:
        return self._numbers[kind] == number

    def deliver(self, kind: str, number: int, result: object) -> None:
        """A job's result, on the GUI thread: handled if it is still the current one."""
        if self.is_current(kind, number):
            self._handlers[kind](result)
