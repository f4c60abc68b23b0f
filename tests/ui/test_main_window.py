"""The main window on the tiny model: start, type, drop a file, stop, start again, close."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import threading

import numpy as np
from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl
from PySide6.QtGui import QDropEvent

from app.audio.file_source import FileAudioSource
from app.llm.ollama_standin import OllamaStandIn, ScriptedReply
from app.settings.schema import AppSettings, LlmSettings, SpeechModelSettings
from app.ui.conversation_controller import ConversationController
from app.ui.main_window import MainWindow


def make_window(qtbot, host: str):
    settings = AppSettings(
        speech=SpeechModelSettings(model_id="tiny", device="cpu"),
        llm=LlmSettings(backend="ollama", host=host, model="standin:latest",
                        tools_enabled=False, stt_model="none"),
    )
    sources: list[FileAudioSource] = []

    def audio(_settings):
        sources.append(FileAudioSource(np.zeros(4800, np.float32)))
        return sources[-1]

    controller = ConversationController(audio)
    window = MainWindow(controller, settings)
    qtbot.addWidget(window)
    window.show()
    return window, controller, sources


def spans(window, final=True):
    return [e for e in window.transcript.entries() if e.kind == "span" and e.final == final]


def test_a_conversation_in_the_window(qtbot, tiny_folder, data_dir, tmp_path):
    threads_before = set(threading.enumerate())
    with OllamaStandIn(script=[ScriptedReply(content="Canberra.")]) as standin:
        window, controller, sources = make_window(qtbot, standin.url)
        window.start_action.trigger()
        qtbot.waitUntil(lambda: controller.state == "running", timeout=60_000)
        assert window.start_action.iconText() == "Stop"

        window.input_box.editor.setPlainText("What is the capital of Australia?")
        window.input_box.send_button.click()
        assert window.input_box.text() == ""  # accepted, so cleared
        qtbot.waitUntil(lambda: any(e.text == "Canberra." for e in spans(window)),
                        timeout=20_000)

        notes = tmp_path / "notes.txt"
        notes.write_text("The meeting is at noon.", encoding="utf-8")
        mime = QMimeData()
        mime.setUrls([QUrl.fromLocalFile(str(notes))])
        drop = QDropEvent(QPointF(10, 10), Qt.DropAction.CopyAction, mime,
                          Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier)
        window.dropEvent(drop)
        qtbot.waitUntil(lambda: any(e.source == "dropped file: notes.txt"
                                    for e in spans(window)), timeout=20_000)
        qtbot.waitUntil(lambda: "context" in window.status_line.context.text(), timeout=5_000)
        assert "frame" in window.status_line.frame.text()
        assert [e for e in window.transcript.entries() if e.kind == "assistant"]

        window.start_action.trigger()  # stop
        qtbot.waitUntil(lambda: controller.state == "stopped", timeout=30_000)
        assert window.start_action.iconText() == "Start"

        window.start_action.trigger()  # a second start after a stop works
        qtbot.waitUntil(lambda: controller.state == "running", timeout=60_000)
        assert len(sources) == 2
        window.close()  # returns at once; the conversation winds down on its threads
        assert controller.wait_shutdown(15.0)
    assert not controller.running
    leftover = {t for t in set(threading.enumerate()) - threads_before if t.is_alive()
                and t.name in ("conversation", "duplex-engine", "orchestrator",
                               "pipeline-router", "file-audio")}
    assert not leftover


def test_typing_before_starting_keeps_the_text(qtbot, tiny_folder, data_dir):
    window, controller, _ = make_window(qtbot, "http://127.0.0.1:9")
    window.input_box.editor.setPlainText("hello?")
    window.input_box.send_button.click()
    assert window.input_box.text() == "hello?"  # nothing typed is lost
    notices = [e for e in window.transcript.entries() if e.kind == "notice"]
    assert notices and "Start a conversation first" in notices[-1].text


def test_a_binary_or_missing_dropped_file_is_a_clear_notice(qtbot, tiny_folder, data_dir,
                                                            tmp_path):
    window, controller, _ = make_window(qtbot, "http://127.0.0.1:9")
    binary = tmp_path / "image.png"
    binary.write_bytes(b"\x89PNG\0\0\0")
    window.read_file(binary)
    window.read_file(tmp_path / "missing.txt")
    texts = [e.text for e in window.transcript.entries() if e.kind == "notice"]
    assert any("not a text file" in t for t in texts)
    assert any("Could not read missing.txt" in t for t in texts)
