"""Slow work a window or settings tab starts (a connection test, listing voices, a test tone,
the memory plan, reading the saved conversations) runs on a thread of its own; its result
comes back to the GUI thread through the one bridge (gui_bridge.py).

A result that arrives after what it was about has changed (another host, another model) is
dropped, so the dialog never shows an answer to a question the user no longer asks: each
kind of job has a number, raised by every new job of that kind and by `drop`, and only the
result of the job that holds the current number is delivered.

The handlers are held weakly (a tab's own methods: a strong hold would make the tab and its
jobs a cycle, freed by the collector instead of when the tab closes), and the job's function,
which may hold the tab, is handed back with the result so that its last reference goes on
the GUI thread.
"""

from __future__ import annotations

import threading
import time
import types
import weakref
from collections.abc import Callable, Mapping
from typing import Any

from PySide6.QtCore import QObject

from app.ui import gui_bridge


def jobs_out() -> int:
    """How many results have not been taken on the GUI thread yet (all windows)."""
    return gui_bridge.expected()


# Every window's job threads that may still run. Started and read on the GUI thread only.
_started: list[threading.Thread] = []


def wait_for_jobs(timeout_s: float) -> bool:
    """Wait up to `timeout_s` for every window's jobs to end; False if one still runs (a
    test's teardown: no job of its left inside torch when the next test, or the process's
    exit, comes)."""
    return _joined(_started, timeout_s)


def _joined(threads: list[threading.Thread], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    return not any(thread.is_alive() for thread in threads)


def _weakly(handler: Callable[[object], None]) -> Callable[[], Callable[[object], None] | None]:
    if isinstance(handler, types.MethodType):
        return weakref.WeakMethod(handler)
    return lambda: handler


class BackgroundJobs(QObject):
    """The jobs of one tab; `handlers` takes each kind's result (a value or the exception
    the job raised) on the GUI thread."""

    def __init__(self, handlers: Mapping[str, Callable[[object], None]],
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._handlers = {kind: _weakly(handler) for kind, handler in handlers.items()}
        self._numbers = dict.fromkeys(self._handlers, 0)
        self._results = gui_bridge.ToGui(self._delivered)
        self._threads: list[threading.Thread] = []  # started, maybe still running

    def start(self, kind: str, fn: Callable[[], Any]) -> int:
        """Run `fn` on a thread of its own; returns the job's number (see `is_current`)."""
        self._numbers[kind] += 1
        number = self._numbers[kind]
        results = self._results
        holder = [fn]  # emptied on the GUI thread once the result is there
        del fn

        def job() -> None:
            try:
                result: object = holder[0]()
            except Exception as exc:  # shown to the user, never raised in a job's thread
                result = exc
            results.post_last(kind, number, result, holder)

        results.expect()
        thread = threading.Thread(target=job, name=f"settings-{kind}", daemon=True)
        self._threads = [t for t in self._threads if t.is_alive()] + [thread]
        _started[:] = [t for t in _started if t.is_alive()] + [thread]
        thread.start()
        return number

    def wait(self, timeout_s: float) -> bool:
        """Wait up to `timeout_s` for the jobs still running (their result, if it comes
        later, is still delivered); False if one is. A job cannot be cut short (a 7B
        planned on meta is torch's for a second or more): the download dialog's shutdown
        waits for them, so no thread of its is inside torch when the process ends."""
        done = _joined(self._threads, timeout_s)
        self._threads = [t for t in self._threads if t.is_alive()]
        return done

    def drop(self, kind: str) -> None:
        """The question changed: the running job's result, if any, will not be delivered."""
        self._numbers[kind] += 1

    def is_current(self, kind: str, number: int) -> bool:
        return self._numbers[kind] == number

    def _delivered(self, kind: str, number: int, result: object,
                   spent: list[Callable[[], Any]]) -> None:
        spent.clear()  # the job's function (and what it holds) goes here, on the GUI thread
        self.deliver(kind, number, result)

    def deliver(self, kind: str, number: int, result: object) -> None:
        """A job's result, on the GUI thread: handled if it is still the current one."""
        handler = self._handlers[kind]()
        if handler is not None and self.is_current(kind, number):
            handler(result)
