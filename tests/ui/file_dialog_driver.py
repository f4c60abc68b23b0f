"""Drives File → Export's dialog in a child process for test_file_dialog_special_files.py:
the GUI thread may freeze here (that is what the test looks for), so the test watches from
outside, with a timeout. Not a test module itself (no test_ prefix).

It opens the export dialog the window uses, types a path into its file-name box as a user
does (key by key: the dialog completes it as it goes), checks that the GUI thread's timer
still ticks, then presses Enter on each path and says what happened, one JSON line per
step on stdout. argv: the FIFO's path, then the other paths to try.
"""

from __future__ import annotations

import errno
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import Qt, QTimer
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication, QFileDialog, QLineEdit, QMessageBox, QWidget

from app.conversation.transcript.entries import TranscriptEntry
from app.conversation.transcript.export import TranscriptHeader
from app.ui.export_dialog import export_with_dialog
from app.ui.ui_state import UiState


def say(**fields: object) -> None:
    print(json.dumps(fields), flush=True)


def reader_on(fifo: str) -> bool:
    """Whether someone opened the FIFO to read it (a write-open without a reader fails)."""
    try:
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            return False
        raise
    os.close(fd)
    return True


def main() -> int:
    fifo, *others = sys.argv[1:]
    app = QApplication(sys.argv[:1])
    parent = QWidget()
    ticks = [0]
    heartbeat = QTimer()
    heartbeat.timeout.connect(lambda: ticks.__setitem__(0, ticks[0] + 1))
    heartbeat.start(20)
    paths = [fifo, *others]
    outcomes: list[dict] = []

    def pump(seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            app.processEvents()
            time.sleep(0.005)

    def drive() -> None:
        dialog = next(w for w in app.topLevelWidgets()
                      if isinstance(w, QFileDialog) and w.isVisible())
        name_box = dialog.findChild(QLineEdit)
        assert name_box is not None
        path = paths[len(outcomes)]
        name_box.setFocus()
        name_box.clear()
        QTest.keyClicks(name_box, path)  # completes as it is typed, as for a user
        before = ticks[0]
        pump(0.5)
        step = {"path": path, "ticked": ticks[0] - before, "fifo_reader": reader_on(fifo)}
        outcomes.append(step)
        say(typed=path, **step)

        def refused() -> None:  # a message box after Enter: the path was refused
            box = next((w for w in app.topLevelWidgets()
                        if isinstance(w, QMessageBox) and w.isVisible()), None)
            step["message"] = box.text() if box is not None else ""
            if box is not None:
                box.accept()
            QTimer.singleShot(50, after)

        def after() -> None:
            say(entered=path, message=step.get("message", ""), fifo_reader=reader_on(fifo),
                still_fifo=os.path.exists(fifo) and not os.path.isfile(fifo))
            if len(outcomes) < len(paths) and dialog.isVisible():
                drive()
            elif dialog.isVisible():
                dialog.reject()

        QTimer.singleShot(200, refused)
        QTest.keyClick(name_box, Qt.Key.Key_Return)

    entries = [TranscriptEntry(1, "user", "Hello", time.time(), origin="s")]
    folder = Path(fifo).parent
    state = UiState(path=folder / "state.ini")
    state.export_dir = folder
    QTimer.singleShot(300, drive)
    result = export_with_dialog(parent, entries, TranscriptHeader(conversation_id="c"), state)
    say(done=True, exported=str(result) if result is not None else None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
