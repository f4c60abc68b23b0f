"""The read-only window of a saved conversation (app/ui/saved_conversation_window.py)."""

from __future__ import annotations

from app.conversation.transcript.entries import QUEUED, TranscriptEntry
from app.conversation.transcript.export import TranscriptHeader, to_markdown
from app.ui.saved_conversation_window import SavedConversationWindow
from app.ui.ui_state import UiState

T0 = 1_790_000_000.0


def _open(qtbot, entries: list[TranscriptEntry]) -> SavedConversationWindow:
    viewer = SavedConversationWindow(
        TranscriptHeader(conversation_id="20261201-100000-abcdef", title="Lunch", started=T0),
        entries, UiState())
    qtbot.addWidget(viewer)
    viewer.show()
    return viewer


def test_a_conversation_cut_off_by_a_crash_says_so_and_shows_nothing_as_in_progress(qtbot):
    """Issue 28, item 12: after a crash the saved file's last bubble was still "growing",
    and the window showed it as in progress with no word that the run ended unexpectedly."""
    entries = [
        TranscriptEntry(1, "user", "Lunch with Ana on Friday?", T0, 1.0, origin="s"),
        TranscriptEntry(2, "span", "Friday 12:30, King Street", T0 + 1, 2.0, origin="s",
                        source="typed", final=False, detail=QUEUED),
        TranscriptEntry(3, "assistant", "Friday at half past", T0 + 2, 3.0, origin="s",
                        final=False),
    ]
    viewer = _open(qtbot, entries)
    shown = viewer.transcript.entries()
    assert all(entry.final for entry in shown), [e for e in shown if not e.final]
    delegate = viewer.transcript.delegate
    assert not any(delegate.header_label(e).endswith("…") for e in shown)
    last = shown[-1]
    assert last.kind == "notice" and last.detail == "warning"
    assert "cut off" in last.text and "ended unexpectedly" in last.text
    assert "cut off" in viewer.about.text()
    span = next(e for e in shown if e.kind == "span")
    assert span.detail.startswith("not injected: ContextSpan ended unexpectedly")
    # What is exported from it is the file as saved: the Markdown marks the partial bubble.
    assert viewer.entries() == entries and "_(partial)_" in to_markdown(viewer.entries())


def test_a_conversation_that_ended_normally_has_no_such_word(qtbot):
    entries = [TranscriptEntry(1, "user", "Hello", T0, 1.0, origin="s"),
               TranscriptEntry(2, "assistant", "Hi there", T0 + 1, 2.0, origin="s")]
    viewer = _open(qtbot, entries)
    assert viewer.transcript.entries() == entries
    assert "cut off" not in viewer.about.text()
