"""Cyclic garbage (a closed dialog held by its own lambda slot) is destroyed on the GUI
thread, never on the background thread whose allocations happen to trip the collector."""

from __future__ import annotations

import threading

import pytest

from app.ui.gui_thread_gc import GuiThreadCollector

# Without the suite's own collector (tests/conftest.py), which would do the work for the
# one under test.
pytestmark = pytest.mark.own_collector


class _Cycle:
    """Garbage only the cyclic collector frees; says on which thread it was freed."""

    def __init__(self, freed_on: list[str]) -> None:
        self.itself = self
        self.freed_on = freed_on

    def __del__(self) -> None:
        self.freed_on.append(threading.current_thread().name)


def _allocate_cycles() -> None:
    # Many gen-0 containers that refcounting never frees: with automatic collection on,
    # this thread runs a collection (and frees the _Cycle) within the first 700 or so.
    for _ in range(20_000):
        junk: list[object] = []
        junk.append(junk)


def test_garbage_is_collected_on_the_gui_thread_not_the_worker_that_allocates(qtbot) -> None:
    collector = GuiThreadCollector()
    collector.start()
    try:
        freed_on: list[str] = []
        _Cycle(freed_on)
        worker = threading.Thread(target=_allocate_cycles, name="survey-worker")
        worker.start()
        worker.join(30)
        assert freed_on == []  # the worker's allocations did not collect it
        qtbot.waitUntil(lambda: bool(freed_on), timeout=5000)
        assert freed_on == [threading.current_thread().name]
    finally:
        collector.stop()


def test_stop_gives_automatic_collection_back(qtbot) -> None:
    import gc

    assert gc.isenabled()
    collector = GuiThreadCollector()
    collector.start()
    assert not gc.isenabled()
    collector.stop()
    assert gc.isenabled()


def _cyclic_garbage(count: int) -> None:
    for _ in range(count):
        junk: list[object] = []
        junk.append(junk)


def test_a_full_collection_waits_until_enough_objects_were_promoted(qtbot) -> None:
    """A full collection holds the GIL (the frame loop's too) for about a tenth of a second:
    short-lived garbage alone never makes one due, as in CPython's own collector; objects
    that live on do."""
    collector = GuiThreadCollector()
    collector.start()
    try:
        chosen = []
        for _ in range(400):  # 40 gen-1 collections' worth of garbage that dies young
            _cyclic_garbage(800)
            chosen.append(collector.collect_due())
        assert chosen.count(1) >= 30 and 2 not in chosen

        kept: list[list[object]] = []
        for _ in range(1000):  # objects that live: they pile up in the oldest generation
            kept.extend([] for _ in range(800))
            if collector.collect_due() == 2:
                break
        else:
            raise AssertionError("no full collection after 800,000 long-lived objects")
    finally:
        collector.stop()
