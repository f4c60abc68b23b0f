"""Opens the main window and every dialog of the app on the screen it is run on, and for each
prints one JSON line (where it is, what of it is off the screen or cut off) and saves a grab
of the whole screen as OUT/<name>.png. Run by test_screens_fit.py in a child process at
QT_SCALE_FACTOR=2 on a 1920×1080 offscreen screen; by hand:

    QT_SCALE_FACTOR=2 QT_QPA_PLATFORM=offscreen:configfile=SCREEN.json \\
        python tests/ui/screens_driver.py OUT

(SCREEN.json: {"screens": [{"name": "s", "x": 0, "y": 0, "width": 1920, "height": 1080,
"logicalDpi": 96, "logicalBaseDpi": 96, "dpr": 1}]}). Not a test module itself.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QPoint, QRect, QSize
from PySide6.QtWidgets import (
    QAbstractButton,
    QApplication,
    QDialogButtonBox,
    QMessageBox,
    QScrollArea,
    QWidget,
)


def _settle(app: QApplication, seconds: float = 0.3,
            until: Callable[[], bool] | None = None, limit_s: float = 120.0) -> None:
    deadline = time.monotonic() + limit_s
    while until is not None and not until() and time.monotonic() < deadline:
        app.processEvents()
        time.sleep(0.02)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        app.processEvents()
        time.sleep(0.02)


def _in_scroll_area(widget: QWidget, top: QWidget) -> bool:
    parent = widget.parentWidget()
    while parent is not None and parent is not top:
        if isinstance(parent, QScrollArea):
            return True
        parent = parent.parentWidget()
    return False


def _must_show(window: QWidget) -> list[QWidget]:
    """What must be in view, never scrolled away: a dialog's buttons, the main window's
    input box, its buttons and the status bar."""
    from app.ui.main_window import MainWindow

    if isinstance(window, MainWindow):
        box = window.input_box
        return [box.editor, box.send_button, box.read_button, window.status_line]
    found: list[QWidget] = []
    for buttons in window.findChildren(QDialogButtonBox):
        found += [b for b in buttons.buttons() if b.isVisibleTo(window)]
    found += [b for b in window.findChildren(QAbstractButton)
              if b.isVisibleTo(window) and not _in_scroll_area(b, window) and b not in found
              and b.parentWidget() is not None and b.window() is window
              and not b.objectName().startswith("qt_")]
    return found


def check(app: QApplication, out: Path, name: str, window: QWidget) -> dict:
    """Where `window` is against its screen, and what of it is not in view."""
    screen = window.screen() or app.primaryScreen()
    room = screen.availableGeometry()
    frame = window.frameGeometry()
    problems: list[str] = []
    if not room.contains(frame):
        problems.append(f"the window {_rect(frame)} is not inside the screen {_rect(room)}")
    least = window.minimumSizeHint().expandedTo(window.minimumSize())
    if least.width() > room.width() or least.height() > room.height():
        problems.append(f"its minimum size {least.width()}x{least.height()} exceeds the "
                        "screen: the window manager cannot make it fit")
    inside = window.rect()
    for widget in _must_show(window):
        if not widget.isVisible():
            problems.append(f"{_name(widget)} is not shown")
            continue
        rect = QRect(widget.mapTo(window, QPoint(0, 0)), widget.size())
        if not inside.contains(rect):
            problems.append(f"{_name(widget)} at {_rect(rect)} is outside the window "
                            f"{inside.width()}x{inside.height()}")
    picture = out / f"{name}.png"
    screen.grabWindow(0).save(str(picture))
    return {"name": name, "frame": _rect(frame), "screen": _rect(room),
            "scale": screen.devicePixelRatio(), "problems": problems,
            "picture": str(picture)}


def _rect(rect: QRect) -> str:
    return f"{rect.width()}x{rect.height()}+{rect.x()}+{rect.y()}"


def _name(widget: QWidget) -> str:
    text = getattr(widget, "text", None)
    label = text() if callable(text) else ""
    return f"{type(widget).__name__} {label[:30]!r}"


def main(out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    app = QApplication(sys.argv[:1])
    from app.checkpoints.catalog import get_manifest
    from app.conversation.transcript.entries import TranscriptEntry
    from app.conversation.transcript.export import TranscriptHeader
    from app.engine.device import survey_devices
    from app.plan.memory_plan import GIB, DeviceMemory
    from app.plan.memory_survey import survey_for_settings
    from app.settings.schema import AppSettings, LlmSettings, SpeechModelSettings
    from app.ui import safe_file_dialog
    from app.ui.about_dialog import about_box
    from app.ui.conversation_controller import ConversationController
    from app.ui.download_dialog import ModelMissingDialog
    from app.ui.main_window import MainWindow
    from app.ui.saved_conversation_window import SavedConversationWindow
    from app.ui.settings.dialog import SettingsDialog
    from app.ui.ui_state import UiState

    results: list[dict] = []

    def report(name: str, window: QWidget) -> None:
        result = check(app, out, name, window)
        results.append(result)
        print(json.dumps(result), flush=True)

    settings = AppSettings(
        speech=SpeechModelSettings(model_id="context-spanning-7b", device="auto"),
        llm=LlmSettings(backend="ollama", host="http://127.0.0.1:9", model="qwen3:4b"))
    card = DeviceMemory("cuda", "A made-up 16 GB card", 16 * GIB, 16 * GIB,
                        precisions=("bf16", "int8"))

    def survey(chosen: AppSettings, _timeout: float):
        return survey_for_settings(chosen, card, timeout_s=0.2)

    def window_of(geometry_from: QWidget | None = None) -> MainWindow:
        if geometry_from is not None:
            UiState().save_window(geometry_from.saveGeometry(), b"")
        window = MainWindow(ConversationController(lambda _s: None), settings)
        window.show()
        _settle(app)
        return window

    main_window = window_of()
    report("main-window", main_window)
    # A geometry saved on a larger screen (or at 100 %), then one left on a screen since
    # unplugged: both are brought back on.
    for name, place in (("main-window-saved-too-large", QRect(0, 0, 1900, 1060)),
                        ("main-window-saved-off-screen", QRect(2600, 1400, 900, 600))):
        donor = QWidget()
        donor.setGeometry(place)
        restored = window_of(donor)
        report(name, restored)
        restored.features.keeper.shutdown()
        restored.close()

    main_window.resize(main_window.size().boundedTo(QSize(900, 500)))
    dialog = SettingsDialog(settings, main_window, stt_models={"kyutai-stt-1b-en_fr":
                                                                 "Kyutai STT 1B"},
                            list_voices=lambda *_: [], list_devices=lambda: (
                                ["A USB microphone with a long name"], ["Speakers"]),
                            memory_survey=survey, device_survey=survey_devices,
                            conversation_running=True)
    dialog.show()
    _settle(app, until=lambda: "GB" in dialog.speech_tab.memory_plan.text()
            and dialog.device_combo.count() > 1)
    for index in range(dialog.tabs.count()):
        dialog.tabs.setCurrentIndex(index)
        _settle(app)
        report(f"settings-{dialog.tabs.tabText(index).split()[0].lower()}", dialog)
    dialog.reject()

    notice = "Your settings file could not be read in full: " + "a long reason " * 30
    for name, manifest, extra in (
            ("first-run-moshi", get_manifest("moshika"), {"gpu_check": lambda: None}),
            ("first-run-gated-personaplex", get_manifest("personaplex"),
             {"gpu_check": lambda: "A made-up GPU"})):
        first = ModelMissingDialog(manifest, main_window, check_size=False, notice=notice,
                                   plan_settings=settings, memory_survey=survey, **extra)
        first.show()
        _settle(app, seconds=0.5, until=lambda d=first: d.machine_checked)
        report(name, first)
        first.reject()
    from app.asr.stt_catalog import get_stt_manifest

    stt = ModelMissingDialog(get_stt_manifest("kyutai-stt-1b-en_fr"), main_window,
                             check_size=False)
    stt.show()
    _settle(app)
    report("speech-recognition-download", stt)
    stt.reject()

    box = about_box(main_window, "Context Spanning 7B (Mindlogic)", "cpu (float32)",
                    "qwen3:4b on Ollama at http://127.0.0.1:11434")
    _settle(app)
    report("about", box)
    box.close()

    with safe_file_dialog._dialog(main_window, "Export the conversation", str(out)) as files:
        files.show()
        _settle(app)
        report("export-file-dialog", files)
        files.reject()

    now = time.time()
    viewer = SavedConversationWindow(
        TranscriptHeader(conversation_id="20261201-100000-abcdef", title="Lunch with Ana",
                         started=now, model="Context Spanning 7B (int8)", device="cuda"),
        [TranscriptEntry(i, "user" if i % 2 else "assistant", "Lunch on Friday? " * 20,
                         now + i, float(i)) for i in range(1, 30)], UiState())
    viewer.show()
    _settle(app)
    report("saved-conversation", viewer)
    viewer.close()

    question = QMessageBox(QMessageBox.Icon.Question, "Close ContextSpan?",
                           "The conversation is not saved. Close anyway?",
                           QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No,
                           main_window)
    question.show()
    _settle(app)
    report("close-question", question)
    question.close()

    main_window.features.keeper.shutdown()
    main_window.close()
    return 0 if not any(r["problems"] for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main(Path(sys.argv[1])))
