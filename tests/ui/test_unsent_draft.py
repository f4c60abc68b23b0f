"""Nothing the user typed is lost (issue 19, item 2): text left unsent in the input box is
kept on disk with the conversations as it is typed, and is back in the box, with a word
saying so, at the next start (after a close, a Quit or a crash alike)."""

from __future__ import annotations

import os
import stat

from app.conversation.transcript.saved import ConversationStore
from app.settings.schema import AppSettings, SpeechModelSettings
from app.ui.conversation_controller import ConversationController
from app.ui.main_window import MainWindow

DRAFT = "What did Ana say about Friday?\nAnd is the Italian place on King Street open?"


def _start_app(qtbot) -> MainWindow:
    """The window as the app opens it: its store is the (test's private) conversations dir."""
    settings = AppSettings(speech=SpeechModelSettings(model_id="tiny", device="cpu"))
    window = MainWindow(ConversationController(lambda _settings: None), settings)
    qtbot.addWidget(window)
    window.show()
    qtbot.waitExposed(window)
    return window


def _quit(window: MainWindow) -> None:
    """Close the window as a user does, then what the app does as it quits."""
    window.close()
    window.features._on_quit()  # aboutToQuit: the app's last writes


def _notices(window: MainWindow) -> list[str]:
    return [e.text for e in window.transcript.entries() if e.kind == "notice"]


def test_unsent_text_is_back_in_the_box_at_the_next_start(qtbot):
    first = _start_app(qtbot)
    first.input_box.editor.setFocus()
    qtbot.keyClicks(first.input_box.editor, "What did Ana say about Friday?")
    first.input_box.editor.insertPlainText(DRAFT[len("What did Ana say about Friday?"):])
    assert first.input_box.editor.toPlainText() == DRAFT
    _quit(first)

    second = _start_app(qtbot)
    assert second.input_box.editor.toPlainText() == DRAFT
    assert any("not sent" in text and "back in the box" in text for text in _notices(second))
    _quit(second)


def test_the_draft_is_on_disk_while_it_is_typed_so_a_crash_loses_nothing(qtbot):
    first = _start_app(qtbot)
    first.input_box.editor.setPlainText(DRAFT)
    draft_file = first.features.keeper.store.folder / "unsent-draft.txt"
    qtbot.waitUntil(draft_file.is_file, timeout=10_000)  # the autosave, no close at all
    assert stat.S_IMODE(os.stat(draft_file).st_mode) == 0o600  # private, like a transcript
    assert draft_file.read_text(encoding="utf-8") == DRAFT
    # The process dies here (kill -9): the next start finds the text all the same.
    second = _start_app(qtbot)
    assert second.input_box.editor.toPlainText() == DRAFT
    _quit(second)
    first.features.keeper.shutdown()


def test_sent_text_does_not_come_back(qtbot):
    first = _start_app(qtbot)
    first.input_box.editor.setPlainText(DRAFT)
    draft_file = first.features.keeper.store.folder / "unsent-draft.txt"
    qtbot.waitUntil(draft_file.is_file, timeout=10_000)  # kept while it waited in the box
    first.input_box.clear()  # what the window does once the text was accepted
    _quit(first)

    second = _start_app(qtbot)
    assert second.input_box.editor.toPlainText() == ""
    assert not any("back in the box" in text for text in _notices(second))
    assert not (ConversationStore().folder / "unsent-draft.txt").exists()
    _quit(second)
