"""A safety net: Python's cyclic garbage collector runs on whichever thread happens to
allocate when a generation's count crosses its threshold. A Qt object caught in a reference
cycle is freed by that collection, and when the thread that trips it is a background one (a
memory plan building a 7B model on meta, the frame loop, a connection test), the object is
destroyed on that thread while the GUI thread may be painting or delivering events to it. Qt
does not allow that; PySide then crashes later, on the GUI thread (seen here: segfaults in
the settings and window tests at varying places, each time with memory-plan threads in
flight).

The app's own dialogs, tabs and windows are no cyclic garbage any more: they are deleted on
the GUI thread when they close (deleteLater, WA_DeleteOnClose), their slots are bound
methods that hold nothing of theirs in a cycle, and the main window, its controller and
DesktopApp hold each other one way only (tests/ui/test_qt_ownership.py checks it with
gc.DEBUG_SAVEALL). This collector stays for what is not ours (a library's cycle, a
future slip), as other PyQt/PySide applications do, for the same reason:
- napari, "python garbage collector can trigger in any thread":
  https://github.com/napari/napari/issues/1029 (the failure, and the timer-driven
  collection on the GUI thread discussed there);
- novelWriter, "Pin Python garbage collection to the main GUI thread":
  https://github.com/saga-soft/novelWriter/issues/2927, done in "Run the Python GC on a
  timer": https://github.com/saga-soft/novelWriter/pull/2940;
- OpenCue's CueGUI, "Stop qtimer wrong thread segfault":
  https://github.com/AcademySoftwareFoundation/OpenCue/pull/598, after
  https://www.riverbankcomputing.com/pipermail/pyqt/2011-August/030378.html.

So while the desktop app runs, automatic collection is off and the GUI thread collects on a
timer, by the rule CPython's own collector follows: the oldest generation whose count passed
its threshold, and the oldest one (a full collection: about 120 ms with the window built, on
a 2-core VM, holding the GIL the frame loop needs too) only once the objects promoted since
the last full one reach a quarter of those that were long-lived then.

After start-up (`freeze_after_start_up`) what the app built to run (modules, the window,
their caches) is moved out of the collector's sight with gc.freeze(): a full collection then
walks only what was made since. `python -m app.ui.gc_bench` measures both.
"""

from __future__ import annotations

import gc

from PySide6.QtCore import QObject, QTimer, Slot


class GuiThreadCollector(QObject):
    """Collects Python's cyclic garbage on the GUI thread, and only there, while started.
    Made (and started) on the GUI thread."""

    INTERVAL_MS = 100  # 10 checks a second; a check with nothing due costs one gc.get_count

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._thresholds = gc.get_threshold()
        self._was_enabled = gc.isenabled()
        self._long_lived = 0  # objects in the oldest generation after its last collection
        self._promoted = 0  # objects that survived into it since
        self._timer = QTimer(self)
        self._timer.setInterval(self.INTERVAL_MS)
        self._timer.timeout.connect(self.collect_due)

    def start(self) -> None:
        self._was_enabled = gc.isenabled()
        gc.disable()
        self._long_lived = len(gc.get_objects(generation=2))
        self._promoted = 0
        self._timer.start()

    def stop(self) -> None:
        """Automatic collection back as it was; what is garbage now is collected here."""
        self._timer.stop()
        gc.collect()
        if self._was_enabled:
            gc.enable()

    def freeze_after_start_up(self) -> None:
        """Start-up is over: collect once, then keep everything alive now out of later
        collections (it lives as long as the app; gc.freeze)."""
        gc.collect()
        gc.freeze()
        self._long_lived = len(gc.get_objects(generation=2))
        self._promoted = 0

    @Slot()
    def collect_due(self) -> int:
        """Collect the oldest generation that is due; returns it, or -1 when none was."""
        counts = gc.get_count()
        young, middle, old = self._thresholds
        if old and counts[2] > old and self._promoted > self._long_lived // 4:
            gc.collect(2)
            self._long_lived = len(gc.get_objects(generation=2))
            self._promoted = 0
            return 2
        if middle and counts[1] > middle:
            younger = len(gc.get_objects(generation=0)) + len(gc.get_objects(generation=1))
            self._promoted += max(0, younger - gc.collect(1))  # the survivors move up
            return 1
        if young and counts[0] > young:
            gc.collect(0)
            return 0
        return -1
