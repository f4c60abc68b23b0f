"""Issue 19, item 12's last sentence: Export opens in a folder that exists (the user's
Documents, else home; never the working directory), Delete names the conversation it is
about to delete, and zooming keeps the entry being read in place."""

from __future__ import annotations

import time
from pathlib import Path

from PySide6.QtCore import QPoint
from PySide6.QtWidgets import QAbstractItemView, QApplication, QMessageBox

from app.conversation.transcript.entries import TranscriptEntry
from app.conversation.transcript.export import TranscriptHeader
from app.ui import safe_file_dialog


def settle() -> None:
    for _ in range(5):
        QApplication.processEvents()


def test_export_opens_in_home_when_there_is_no_documents_folder(bare_window, tmp_path,
                                                                 monkeypatch):
    home = tmp_path / "home"
    home.mkdir()  # a desktop without a Documents folder (no XDG user dirs either)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    opened: list[Path] = []

    def ask(_parent, _caption, start, _filters):
        opened.append(Path(start))
        return "", ""  # cancelled: where it opened is what is checked

    monkeypatch.setattr(safe_file_dialog, "save_file_name", ask)
    bare_window.controller.entry.emit(TranscriptEntry(1, "user", "hi", time.time(), origin="s"))
    bare_window.export_action.trigger()
    assert opened[0].parent.is_dir()  # a missing folder opens Qt's dialog in the cwd
    assert opened[0].parent == home


def test_delete_names_the_conversation(bare_window, monkeypatch):
    features = bare_window.features
    started = time.mktime((2026, 11, 30, 18, 5, 0, 0, 0, -1))
    header = TranscriptHeader(conversation_id="20261130-180500-a1b2c3", title="Lunch with Ana",
                              started=started)
    features.keeper.store.save(header, [TranscriptEntry(1, "user", "Lunch with Ana?", started)])
    asked: list[str] = []

    def question(_parent, _title, text, *_args):
        asked.append(text)
        return QMessageBox.StandardButton.No

    monkeypatch.setattr(QMessageBox, "question", question)
    features.delete_saved(header.conversation_id)
    assert "Lunch with Ana" in asked[0] and "2026-11-30 18:05" in asked[0], asked
    assert features.keeper.store.path_of(header.conversation_id).is_file()  # No: kept


def test_zoom_keeps_the_entry_being_read_at_the_top(qtbot, bare_window):
    panel = bare_window.transcript
    panel.extend([TranscriptEntry(row, "user" if row % 2 else "assistant",
                                  f"Entry {row}: " + "words that wrap over a line or two " * 3,
                                  time.time(), origin="s") for row in range(120)])
    settle()
    view = panel.view
    view.scrollTo(panel.model.index(60), QAbstractItemView.ScrollHint.PositionAtTop)
    settle()
    reading = view.indexAt(QPoint(4, 2)).row()
    assert 55 <= reading <= 65  # reading in the middle, not following the end
    for step in (panel.zoom_in, panel.zoom_in, panel.zoom_in, panel.zoom_out):
        step()
        settle()
        assert view.indexAt(QPoint(4, 2)).row() == reading, (panel.zoom, reading)
