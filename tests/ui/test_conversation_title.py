"""The live conversation is named after what the user said or typed (or the first span), never
after the model's babble before anyone spoke (issue 19, item 11d); the list follows the title
when the user's first words arrive."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from pytestqt.qtbot import QtBot

from app.conversation.transcript.entries import TranscriptEntry
from app.conversation.transcript.saved import ConversationStore, title_for
from app.settings.schema import AppSettings
from app.ui.conversation_keeper import ConversationKeeper
from app.ui.transcript_panel import TranscriptPanel

T0 = 1_790_000_000.0


def _entry(entry_id: int, kind, text: str) -> TranscriptEntry:
    return TranscriptEntry(entry_id, kind, text, T0 + entry_id, origin="session-1")


def test_the_models_babble_never_names_the_conversation() -> None:
    babble = _entry(1, "assistant", "Hello hello, so, um, yes the the")
    assert title_for([babble]) == "Conversation"
    span = _entry(2, "span", "Meeting notes: lunch with Ana")
    assert title_for([babble, span]) == "Meeting notes: lunch with Ana"
    asked = _entry(3, "user", "What is the capital of Australia?")
    assert title_for([babble, span, asked]) == "What is the capital of Australia?"


def test_the_saved_title_and_the_list_follow_the_users_first_words(qtbot: QtBot,
                                                                   tmp_path) -> None:
    panel = TranscriptPanel()
    qtbot.addWidget(panel)
    store = ConversationStore(tmp_path)
    keeper = ConversationKeeper(panel, store, AppSettings, autosave_ms=10_000)
    listed: list[int] = []
    keeper.listChanged.connect(lambda: listed.append(1))  # the list redraws its titles
    keeper.on_entry(_entry(1, "assistant", "Yes yes the so um"))
    keeper.flush()
    qtbot.waitUntil(lambda: bool(listed), timeout=5000)  # listed once it has a file
    assert store.load(keeper.conversation_id)[0].title == "Conversation"
    before = len(listed)
    keeper.on_entry(_entry(2, "user", "Remind me what we said about Lyon"))
    keeper.flush()
    assert store.load(keeper.conversation_id)[0].title == "Remind me what we said about Lyon"
    assert len(listed) > before  # the list learns the new title
    keeper.shutdown()
