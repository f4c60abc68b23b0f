"""Slow work a settings tab starts (a connection test, listing voices, a test tone) runs on
the Qt thread pool; its result comes back to the GUI thread by a queued signal.

A result that arrives after what it was about has changed (another host, another model) is
dropped, so the dialog never shows an answer to a question the user no longer asks: each
kind of job has a number, raised by every new job of that kind and by `drop`, and only the
result of the job that holds the current number is delivered.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from PySide6.QtCore import QObject, QThreadPool, Signal, Slot


class _JobSignals(QObject):
    """Carries a job's result to the GUI thread (queued: it lives there).

    It has no parent, so a job finishing after its tab is gone emits into a live object
    whose connection Qt has already dropped with the tab."""

    finished = Signal(str, int, object)  # job kind, number, result value or the exception


class BackgroundJobs(QObject):
    """The jobs of one tab; `handlers` takes each kind's result (a value or the exception
    the job raised) on the GUI thread."""

    def __init__(self, handlers: Mapping[str, Callable[[object], None]],
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._handlers = dict(handlers)
        self._numbers = dict.fromkeys(self._handlers, 0)
        self._signals = _JobSignals()
        self._signals.finished.connect(self._finished)

    def start(self, kind: str, fn: Callable[[], Any]) -> int:
        """Run `fn` on the thread pool; returns the job's number (see `is_current`)."""
        self._numbers[kind] += 1
        number = self._numbers[kind]
        signals = self._signals

        def job() -> None:
            try:
                result: object = fn()
            except Exception as exc:  # shown to the user, never raised in a pool thread
                result = exc
            signals.finished.emit(kind, number, result)

        QThreadPool.globalInstance().start(job)
        return number

    def drop(self, kind: str) -> None:
        """The question changed: the running job's result, if any, will not be delivered."""
        self._numbers[kind] += 1

    def is_current(self, kind: str, number: int) -> bool:
        return self._numbers[kind] == number

    @Slot(str, int, object)  # a declared slot: PySide delivers cross-thread calls safely
    def _finished(self, kind: str, number: int, result: object) -> None:
        if self.is_current(kind, number):
            self._handlers[kind](result)
