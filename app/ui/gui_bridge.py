"""The one way from a worker thread to the GUI thread: a worker posts plain data into a
queue, and ONE relay on the GUI thread takes it out on a timer and calls the slot it is for.

Every thread that is not the GUI thread (a conversation's session, a settings tab's job, a
download, the autosave's writer) reaches the window this way and no other. The worker holds
a `ToGui`: a plain Python object with a weak reference to the slot's QObject, so it touches
no Qt object at all and never holds the last reference to one (a window closed meanwhile
gets nothing, and is freed on the GUI thread). What the worker posts is released on the GUI
thread too, after its slot has run.

Why not Qt signals emitted from the worker (what Qt's own documentation allows and what
buzz does with its worker objects): here that form crashed the suite with segfaults, and so
did the two others tried before this one (a per-tab signal object freed on the pool's
thread, QThreadPool.start(callable)). A signal's emission from a Python thread touches the
sender's wrapper there, and a wrapper whose last reference goes on that thread destroys its
QObject there: the crash comes later, on the GUI thread. A queue.SimpleQueue.put touches
nothing of Qt.

The relay polls every POLL_MS while something is expected (`expect` ... a final post, or
`settle`): up to 25 ms of delay per message, well under one 80 ms frame. Otherwise it polls
every IDLE_POLL_MS, so what comes unannounced (the autosave's report of a write) still
arrives, and an idle app wakes up twice a second for it.
"""

from __future__ import annotations

import queue
import types
import weakref
from collections.abc import Callable
from typing import Any

import shiboken6
from PySide6.QtCore import QObject, QTimer

# A posted call: the slot (held weakly when it is a QObject's method), its arguments, and
# whether it is the last one its `expect` waited for.
_Posted = tuple[Callable[[], "Callable[..., Any] | None"], tuple[Any, ...], bool]


class _Relay(QObject):
    """Takes the posted calls out on the GUI thread. Made there once (the first `ToGui`),
    never freed."""

    POLL_MS = 25
    IDLE_POLL_MS = 500

    def __init__(self) -> None:
        super().__init__()
        self._posted: queue.SimpleQueue[_Posted] = queue.SimpleQueue()
        self._expected = 0  # changed on the GUI thread only
        self._timer = QTimer(self)
        self._timer.setInterval(self.IDLE_POLL_MS)
        self._timer.timeout.connect(self.deliver)
        self._timer.start()

    def put(self, posted: _Posted) -> None:
        """Any thread."""
        self._posted.put(posted)

    def expect(self) -> None:
        """GUI thread: something will be posted; poll until it has come (or `settle`)."""
        self._expected += 1
        if self._timer.interval() != self.POLL_MS:
            self._timer.start(self.POLL_MS)

    def settle(self) -> None:
        """GUI thread: one `expect` is over (what was posted meanwhile still comes)."""
        self._expected -= 1

    def expected(self) -> int:
        return self._expected

    def deliver(self) -> None:
        """GUI thread: every call posted so far, in the order it was posted."""
        while True:
            try:
                slot_ref, args, final = self._posted.get_nowait()
            except queue.Empty:
                break
            if final:
                self._expected -= 1
            slot = slot_ref()
            owner = getattr(slot, "__self__", None)
            if slot is not None and (not isinstance(owner, QObject) or shiboken6.isValid(owner)):
                slot(*args)
            del slot, owner, args  # what the worker sent ends here, on the GUI thread
        if self._expected <= 0 and self._timer.interval() != self.IDLE_POLL_MS:
            self._expected = 0
            self._timer.start(self.IDLE_POLL_MS)


_relay: _Relay | None = None


def the_relay() -> _Relay:
    """The relay, made on first use (on the GUI thread, where every `ToGui` is made)."""
    global _relay
    if _relay is None:
        _relay = _Relay()
    return _relay


def expected() -> int:
    """How many `expect`s are still open (all windows): a test waits for 0."""
    return 0 if _relay is None else _relay.expected()


class ToGui:
    """A worker's way to call `slot` on the GUI thread. Made on the GUI thread; `post` and
    `post_last` are called from any thread.

    A QObject's bound method is held weakly (the worker never keeps the window alive); a plain
    function is held as it is."""

    def __init__(self, slot: Callable[..., Any]) -> None:
        self._relay = the_relay()
        self._slot: Callable[[], Callable[..., Any] | None]
        if isinstance(slot, types.MethodType):
            self._slot = weakref.WeakMethod(slot)
        else:
            self._slot = _Strong(slot)

    def expect(self) -> None:
        """GUI thread: a `post_last` (or a `settle`) will follow."""
        self._relay.expect()

    def settle(self) -> None:
        """GUI thread: stop waiting for this `expect` (after what was posted, on the next tick)."""
        self._relay.settle()

    def post(self, *args: Any) -> None:
        """Any thread: `slot(*args)` on the GUI thread, soon, in posting order."""
        self._relay.put((self._slot, args, False))

    def post_last(self, *args: Any) -> None:
        """Any thread: as `post`, and it is what the matching `expect` waited for."""
        self._relay.put((self._slot, args, True))


class _Strong:
    """A plain function, called like a dead-or-alive weak reference."""

    def __init__(self, function: Callable[..., Any]) -> None:
        self._function = function

    def __call__(self) -> Callable[..., Any]:
        return self._function
