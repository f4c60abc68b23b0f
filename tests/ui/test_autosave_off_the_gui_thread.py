"""Autosave does not depend on the GUI thread being free (issue 19, item 4): a file dialog
that froze the GUI thread once stopped autosave with it. Here the test itself holds the GUI
thread (it processes no Qt event at all) while a real conversation on the tiny model takes a
typed question and a dropped file; their entries must reach the saved conversation all the
same, straight from the session's thread."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np

from app.audio.file_source import FileAudioSource
from app.conversation.transcript.export import read_transcript
from app.settings.schema import AppSettings, LlmSettings, SpeechModelSettings
from app.ui.conversation_controller import ConversationController
from app.ui.main_window import MainWindow
from tests.waiting import wait_until

QUESTION = "Where did we leave the keys?"
NOTES = "Notes: the keys are in the blue bowl by the door."


def _saved_entries(path) -> list:
    try:
        return read_transcript(path.read_text(encoding="utf-8"))[1]
    except (OSError, ValueError):
        return []


def test_autosave_goes_on_while_the_gui_thread_is_blocked(qtbot, tiny_folder, data_dir):
    settings = AppSettings(speech=SpeechModelSettings(model_id="tiny", device="cpu"),
                           llm=LlmSettings(backend="none"))
    source = FileAudioSource(np.zeros(24000, np.float32))
    controller = ConversationController(lambda _s: source)
    window = MainWindow(controller, settings)
    qtbot.addWidget(window)
    window.show()
    controller.start(settings)
    qtbot.waitUntil(lambda: controller.state == "running", timeout=180_000)
    keeper = window.features.keeper
    path = keeper.store.path_of(keeper.conversation_id)
    try:
        # From here the GUI thread is blocked: wait_until sleeps, it never runs Qt's loop.
        controller.send_text(QUESTION)
        controller.inject_text(NOTES, "dropped file: notes.txt")

        def saved() -> bool:
            entries = _saved_entries(path)
            return (any(e.kind == "user" and e.text == QUESTION for e in entries)
                    and any(e.kind == "span" and e.text == NOTES for e in entries))

        wait_until(saved, 90, interval=0.1,
                   message=lambda: f"not saved while the GUI thread was blocked: "
                                   f"{[(e.kind, e.text[:30]) for e in _saved_entries(path)]}")
    finally:
        controller.shutdown()
        window.close()
