"""The saved conversations are read off the GUI thread (a long history is many files): the
list shows them when read, and the delete question names the conversation from that one
file, not by reading the whole history again."""

from __future__ import annotations

import threading

from PySide6.QtWidgets import QMessageBox

from app.conversation.transcript.entries import TranscriptEntry
from app.conversation.transcript.export import TranscriptHeader

SAVED_ID = "20260101-000000-aaaaaa"


def test_the_list_is_read_off_the_gui_thread_and_the_delete_question_reads_nothing(
        qtbot, bare_window, monkeypatch) -> None:
    features = bare_window.features
    store = features.keeper.store
    store.save(TranscriptHeader(conversation_id=SAVED_ID, started=1_767_225_600.0),
               [TranscriptEntry(1, "user", "What is the capital of Australia?", 1.0)])
    read_on: list[threading.Thread] = []
    real_list = store.list

    def recorded_list():
        read_on.append(threading.current_thread())
        return real_list()

    monkeypatch.setattr(store, "list", recorded_list)
    features.refresh_list()
    qtbot.waitUntil(lambda: SAVED_ID in features.conversation_list.ids(), timeout=5000)
    assert read_on and threading.main_thread() not in read_on

    asked: list[str] = []

    def question(_parent, _title, text, *_args):
        asked.append(text)
        return QMessageBox.StandardButton.No

    monkeypatch.setattr(QMessageBox, "question", question)
    reads_before = len(read_on)
    features.delete_saved(SAVED_ID)
    assert asked and asked[0].startswith("“What is the capital of Australia?”")
    assert len(read_on) == reads_before  # the history was not read again for it
    assert store.path_of(SAVED_ID).exists()  # "No" deletes nothing
