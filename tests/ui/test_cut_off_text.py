"""Issue 28, item 3: no text is cut off. The speech-recognition download dialog's labels
("…(0.5 s delay, sema"), the toolbar's "Settings" at 640×480, the memory plan's last line in
Settings, and a failed download's error said twice around an empty progress bar."""

from __future__ import annotations

from PySide6.QtCore import QPoint, QRect
from PySide6.QtWidgets import QApplication, QLabel, QToolBar, QToolButton

from app.asr.stt_catalog import get_stt_manifest
from app.checkpoints.downloader import DownloadError
from app.ui.download_dialog import ModelMissingDialog


def _settle(rounds: int = 8) -> None:
    for _ in range(rounds):
        QApplication.processEvents()


def _inside(widget, outer) -> bool:
    return outer.rect().contains(QRect(widget.mapTo(outer, QPoint(0, 0)), widget.size()))


def test_the_speech_recognition_dialog_reads_whole(qtbot):
    dialog = ModelMissingDialog(get_stt_manifest("kyutai-stt-1b-en_fr"), check_size=False)
    qtbot.addWidget(dialog)
    dialog.show()
    _settle()
    viewport = dialog.choices_area.viewport()
    assert dialog.body.width() <= viewport.width(), (dialog.body.width(), viewport.width())
    for label in dialog.body.findChildren(QLabel):
        if label.isVisible() and label.text():
            assert _inside(label, viewport), label.text()[:50]
            if label.wordWrap():
                assert label.height() >= label.heightForWidth(label.width()), label.text()[:50]
            else:  # one line: all of it drawn
                assert label.width() >= label.fontMetrics().horizontalAdvance(
                    label.text()), label.text()[:50]


def test_every_toolbar_button_is_shown_whole_at_640_by_480(bare_window):
    window = bare_window
    window.resize(640, 480)
    _settle(20)
    [toolbar] = window.findChildren(QToolBar)
    for action in toolbar.actions():
        if not action.isVisible() or action.isSeparator():
            continue
        button = toolbar.widgetForAction(action)
        assert button is not None and button.isVisible(), action.text()
        assert _inside(button, toolbar), (action.text(), button.geometry())
        if isinstance(button, QToolButton):
            text = action.text().replace("&", "")
            assert button.width() >= button.fontMetrics().horizontalAdvance(text), text
    extension = [b for b in toolbar.findChildren(QToolButton)
                 if b.objectName() == "qt_toolbar_ext_button"]
    assert not any(b.isVisible() for b in extension), "a button went into the » menu"


def test_a_failed_download_says_it_once_and_hides_the_empty_bar(qtbot, tmp_path):
    dialog = ModelMissingDialog(get_stt_manifest("kyutai-stt-1b-en_fr"), check_size=False,
                                folder=tmp_path / "stt")
    qtbot.addWidget(dialog)
    dialog.show()
    failure = DownloadError("Could not reach huggingface.co: the network is unreachable")
    dialog._on_plan_failed(failure)
    dialog.progress_bar.setVisible(True)  # as start_download leaves it
    dialog._on_download_failed(failure)
    _settle()
    shown = [label.text() for label in dialog.findChildren(QLabel)
             if label.isVisible() and label.text()]
    said = [text for text in shown if "network is unreachable" in text]
    assert len(said) == 1, shown
    assert not dialog.progress_bar.isVisible()  # nothing arrived: no empty bar


def test_the_memory_plan_reads_whole_in_settings(qtbot, tmp_path, monkeypatch):
    """Context Spanning 7B's plan is three lines or more; its last one was drawn under the
    Voice row (the form squashed the label to the dialog's height)."""
    from app.plan.memory_plan import GIB, DeviceMemory
    from app.plan.memory_survey import survey_for_settings
    from app.settings.schema import AppSettings, LlmSettings, SpeechModelSettings
    from app.ui.settings.dialog import SettingsDialog

    monkeypatch.setenv("CONTEXTSPAN_DATA_DIR", str(tmp_path / "data"))
    card = DeviceMemory("cuda", "A made-up 16 GB card", 16 * GIB, 16 * GIB,
                        precisions=("bf16", "int8"))
    settings = AppSettings(
        speech=SpeechModelSettings(model_id="context-spanning-7b", device="cuda"),
        llm=LlmSettings(backend="ollama", host="http://127.0.0.1:9", model="qwen3:4b"))
    dialog = SettingsDialog(settings, stt_models={}, list_voices=lambda *_: [],
                            memory_survey=lambda s, _t: survey_for_settings(
                                s, card, timeout_s=0.2))
    qtbot.addWidget(dialog)
    dialog.show()
    plan = dialog.speech_tab.memory_plan
    qtbot.waitUntil(lambda: "not counted" in plan.text(), timeout=60_000)
    dialog.resize(dialog.width(), 520)  # a short screen
    _settle(20)
    label = plan.label
    assert label.height() >= label.heightForWidth(label.width()), (
        label.height(), label.heightForWidth(label.width()))
    below = dialog.voice_combo.mapTo(dialog.speech_tab, QPoint(0, 0)).y()
    assert label.mapTo(dialog.speech_tab, QPoint(0, label.height())).y() <= below
