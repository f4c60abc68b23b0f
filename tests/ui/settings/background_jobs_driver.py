"""Run as a script (tests/ui/settings/test_background_jobs.py): settings tabs closed while
their background jobs still run, the jobs holding the tabs, many times over. Prints
"delivered N, dropped M" and exits 0 when the process survives it."""

from __future__ import annotations

import gc
import os
import sys
import threading
import time

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import QCoreApplication, QEvent
from PySide6.QtWidgets import QApplication, QWidget

from app.ui.background_jobs import BackgroundJobs, jobs_out

ROUNDS = 40


def main() -> int:
    app = QApplication([])
    delivered: list[object] = []
    for round_index in range(ROUNDS):
        release = threading.Event()
        tab = QWidget()
        jobs = BackgroundJobs({"plan": delivered.append}, parent=tab)

        def slow(tab: QWidget = tab, release: threading.Event = release) -> str:
            release.wait(5)
            return tab.objectName()  # the job holds the tab, as a tab's lambda does

        jobs.start("plan", slow)
        if round_index % 2:  # half the tabs close while their job runs
            tab.deleteLater()
            del tab, jobs, slow
            QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
            gc.collect()
        release.set()
        for thread in threading.enumerate():
            if thread.name.startswith("settings-"):
                thread.join(5)
        deadline = time.monotonic() + 5
        while jobs_out() and time.monotonic() < deadline:  # the relay polls on a timer
            app.processEvents()
            time.sleep(0.005)
        gc.collect()
    print(f"delivered {len(delivered)}, dropped {ROUNDS - len(delivered)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
