"""Issue 35, item 15: OK saved a model or a server that Test connection had just refused, and
"Restart the conversation now" then stopped a working conversation for one that could not
start. OK asks first; "Back to the settings" keeps the dialog open where the refusal is,
"Save anyway" saves it for the next conversation and leaves a running one alone. The real
Ollama client against the stand-in (which lacks the model) and the real speech-server test
against a closed port."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication, QDialogButtonBox, QMessageBox

from app.llm.ollama_standin import OllamaStandIn
from app.settings.schema import AppSettings, EngineSettings, LlmSettings
from app.ui.background_jobs import wait_for_jobs
from app.ui.settings.dialog import SettingsDialog

WAIT_MS = 30_000
JOBS_END_S = 120.0  # a bound for the tabs' jobs to end (the memory plan), not a time
BACK, ANYWAY = "Back to the settings", "Save anyway"


@pytest.fixture(autouse=True)
def private_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("CONTEXTSPAN_DATA_DIR", str(tmp_path / "data"))
    yield
    assert wait_for_jobs(JOBS_END_S)


def make_dialog(qtbot, settings: AppSettings) -> SettingsDialog:
    dialog = SettingsDialog(settings, catalog={}, stt_models={}, list_voices=lambda *_: [])
    qtbot.addWidget(dialog)
    dialog.show()
    return dialog


def press_ok_and_answer(dialog: SettingsDialog, answer: str | None) -> str:
    """Press OK; when a question comes, press `answer` in it and return its text (none
    came: "")."""
    asked: list[str] = []

    def answer_it(polls: int = 0) -> None:
        box = QApplication.activeModalWidget()
        if not isinstance(box, QMessageBox):
            if polls < 500:
                QTimer.singleShot(10, lambda: answer_it(polls + 1))
            return
        asked.append(f"{box.text()}\n{box.informativeText()}")
        (button,) = [b for b in box.buttons() if b.text() == answer]
        button.click()

    if answer is not None:
        QTimer.singleShot(0, answer_it)
    dialog.findChild(QDialogButtonBox).button(QDialogButtonBox.StandardButton.Ok).click()
    return asked[0] if asked else ""


def test_a_model_the_test_refused_is_not_saved_without_asking(qtbot) -> None:
    with OllamaStandIn(models=("qwen3:4b",)) as standin:
        dialog = make_dialog(qtbot, AppSettings(llm=LlmSettings(
            backend="ollama", host=standin.url, model="not-pulled:7b")))
        dialog.tabs.setCurrentWidget(dialog.llm_tab)
        dialog.test_connection()
        qtbot.waitUntil(lambda: dialog.test_button.isEnabled()
                        and "not installed" in dialog.connection_status.text(),
                        timeout=WAIT_MS)
        dialog.tabs.setCurrentWidget(dialog.speech_tab)
        asked = press_ok_and_answer(dialog, BACK)
        assert "Test connection refused" in asked and "not-pulled:7b" in asked, asked
        assert "not installed" in asked and "neither changed nor restarted" in asked
        assert dialog.isVisible() and dialog.result() == 0  # not saved
        assert dialog.tabs.currentWidget() is dialog.llm_tab  # where the refusal is said
        asked = press_ok_and_answer(dialog, ANYWAY)
        assert dialog.result() == 1
        assert dialog.saved_refused == (f"the LLM not-pulled:7b at {standin.url}",)


def test_a_model_chosen_after_the_refusal_is_saved_without_a_question(qtbot) -> None:
    with OllamaStandIn(models=("qwen3:4b",)) as standin:
        dialog = make_dialog(qtbot, AppSettings(llm=LlmSettings(
            backend="ollama", host=standin.url, model="not-pulled:7b")))
        dialog.test_connection()
        qtbot.waitUntil(lambda: "not installed" in dialog.connection_status.text(),
                        timeout=WAIT_MS)
        dialog.llm_model_combo.setCurrentText("qwen3:4b")  # one of the list the test filled
        assert press_ok_and_answer(dialog, None) == ""
        assert dialog.result() == 1 and dialog.saved_refused == ()


def test_a_speech_server_the_test_refused_is_not_saved_without_asking(qtbot) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    dialog = make_dialog(qtbot, AppSettings(engine=EngineSettings(mode="server",
                                                                  server_url=url)))
    box = dialog.engine_box
    box.test_button.click()
    qtbot.waitUntil(lambda: box.test_button.text() == "Test connection", timeout=WAIT_MS)
    assert "Nothing answers" in box.status.text()
    dialog.tabs.setCurrentWidget(dialog.tools_tab)
    asked = press_ok_and_answer(dialog, BACK)
    assert f"the speech server at {url}: Nothing answers" in asked, asked
    assert dialog.result() == 0 and dialog.tabs.currentWidget() is dialog.speech_tab
    box.local_radio.setChecked(True)  # the speech model on this computer: no question
    assert press_ok_and_answer(dialog, None) == ""
    assert dialog.result() == 1 and dialog.saved_refused == ()
