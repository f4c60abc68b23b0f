"""The one bridge from worker threads to the GUI thread (app/ui/gui_bridge.py): what a worker
posts is called on the GUI thread, in each worker's order, none lost; a closed window's slot
is not called and the worker never keeps the window alive; what a worker sent is released on
the GUI thread; an `expect` ends with its last post."""

from __future__ import annotations

import gc
import os
import threading
import weakref

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import QCoreApplication, QEvent, QObject

from app.ui import gui_bridge
from app.ui.gui_bridge import ToGui

WAIT_MS = 10_000
WORKERS = 3
POSTS = 200


class Window(QObject):
    """Stands for a window: a QObject whose slot the workers' posts are for."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[int, int, int]] = []  # (worker, its post's number, thread)

    def on_post(self, worker: int, number: int) -> None:
        self.calls.append((worker, number, threading.get_ident()))


def _in_workers(work) -> None:
    threads = [threading.Thread(target=work, args=(w,)) for w in range(WORKERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30.0)
        assert not thread.is_alive()


def test_every_post_is_called_on_the_gui_thread_in_each_workers_order(qtbot):
    window = Window()
    to_gui = ToGui(window.on_post)

    def work(worker: int) -> None:
        for number in range(POSTS):
            to_gui.post(worker, number)

    _in_workers(work)
    qtbot.waitUntil(lambda: len(window.calls) == WORKERS * POSTS, timeout=WAIT_MS)
    assert {thread for _, _, thread in window.calls} == {threading.main_thread().ident}
    for worker in range(WORKERS):
        assert [n for w, n, _ in window.calls if w == worker] == list(range(POSTS))


def test_a_closed_windows_slot_is_not_called_and_the_worker_does_not_keep_it(qtbot):
    window, delivered = Window(), Window()
    gone = weakref.ref(window)
    to_gui, witness = ToGui(window.on_post), ToGui(delivered.on_post)
    window.deleteLater()
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    del window
    gc.collect()
    assert gone() is None  # the ToGui the worker holds did not keep it
    to_gui.post(0, 1)  # for the closed window: dropped
    witness.post(0, 2)  # posted after it: delivered, so the first one's turn has passed
    qtbot.waitUntil(lambda: delivered.calls != [], timeout=WAIT_MS)
    assert [(w, n) for w, n, _ in delivered.calls] == [(0, 2)]


def test_a_slot_whose_qt_object_was_deleted_is_not_called(qtbot):
    """The window's Qt side was deleted while Python still holds its wrapper (a closed
    dialog someone kept): calling its method would touch a deleted C++ object."""
    window, delivered = Window(), Window()
    to_gui, witness = ToGui(window.on_post), ToGui(delivered.on_post)
    window.deleteLater()
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    to_gui.post(0, 1)
    witness.post(0, 2)
    qtbot.waitUntil(lambda: delivered.calls != [], timeout=WAIT_MS)
    assert window.calls == []


class Sent:
    """Something a worker posts; says on which thread it was freed."""

    freed_on: list[int] = []

    def __del__(self) -> None:
        Sent.freed_on.append(threading.get_ident())


def test_what_a_worker_sent_is_released_on_the_gui_thread(qtbot):
    received: list[bool] = []
    to_gui = ToGui(lambda sent: received.append(isinstance(sent, Sent)))
    Sent.freed_on.clear()

    def work(_worker: int) -> None:
        to_gui.post(Sent())  # the worker's own reference ends here, on its thread

    _in_workers(work)
    qtbot.waitUntil(lambda: len(Sent.freed_on) == WORKERS, timeout=WAIT_MS)
    assert received == [True] * WORKERS
    assert set(Sent.freed_on) == {threading.main_thread().ident}


def test_an_expect_ends_with_its_last_post(qtbot, monkeypatch):
    # A relay of this test's own: the app's one counts every window's expects, and an
    # earlier test may have left one open (a session it never ended).
    monkeypatch.setattr(gui_bridge, "_relay", None)
    window = Window()
    to_gui = ToGui(window.on_post)
    assert gui_bridge.expected() == 0
    to_gui.expect()
    assert gui_bridge.expected() == 1
    worker = threading.Thread(target=lambda: (to_gui.post(0, 0), to_gui.post_last(0, 1)))
    worker.start()
    worker.join(30.0)
    qtbot.waitUntil(lambda: gui_bridge.expected() == 0, timeout=WAIT_MS)
    assert [(w, n) for w, n, _ in window.calls] == [(0, 0), (0, 1)]
