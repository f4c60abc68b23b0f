"""Slow work a settings tab starts (a connection test, listing voices, a test tone, the
memory plan) runs on a thread of its own; its result comes back to the GUI thread by a queued
signal.

A result that arrives after what it was about has changed (another host, another model) is
dropped, so the dialog never shows an answer to a question the user no longer asks: each
kind of job has a number, raised by every new job of that kind and by `drop`, and only the
result of the job that holds the current number is delivered.

A job may outlive its tab (the dialog closed while Ollama had not answered). So no Qt object
of the tab is touched, or freed, on the pool's thread: results go through ONE relay that
lives on the GUI thread for the whole run, addressed to the tab's jobs by a weak reference
(a tab gone by then gets nothing), and the job's function, which may hold the tab, is handed
back with the result so that its last reference goes on the GUI thread. (A relay per tab,
freed with the job's closure on the pool thread while its queued result was pending, crashed
the process: "Signal source has been deleted", then a segfault.)
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Mapping
from typing import Any

import shiboken6
from PySide6.QtCore import QObject, Signal, Slot


class _Relay(QObject):
    """Carries every job's result to the GUI thread; made there once, never freed."""

    finished = Signal(object, str, int, object, object)  # jobs ref, kind, number, result, fn

    def __init__(self) -> None:
        super().__init__()
        self.finished.connect(self._deliver)

    @Slot(object, str, int, object, object)  # a declared slot: PySide queues it safely
    def _deliver(self, jobs_ref: weakref.ref[BackgroundJobs], kind: str, number: int,
                 result: object, spent: list[Callable[[], Any]]) -> None:
        spent.clear()  # the job's function (and what it holds) goes here, on this thread
        jobs = jobs_ref()
        if jobs is not None and shiboken6.isValid(jobs):
            jobs.deliver(kind, number, result)


_relay: _Relay | None = None


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
        """Run `fn` on the thread pool; returns the job's number (see `is_current`)."""
        self._numbers[kind] += 1
        number = self._numbers[kind]
        relay, jobs_ref = _the_relay(), weakref.ref(self)
        holder = [fn]  # emptied on the GUI thread once the result is there
        del fn

        def job() -> None:
            try:
                result: object = holder[0]()
            except Exception as exc:  # shown to the user, never raised in a pool thread
                result = exc
            relay.finished.emit(jobs_ref, kind, number, result, holder)

        # A Python thread, not QThreadPool.start(callable): PySide frees the pool's wrapper
        # of a Python callable where the GIL is not held, and the suite crashed there
        # (segfaults in QThreadPool.waitForDone after many dialogs' jobs).
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
