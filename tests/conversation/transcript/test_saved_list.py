"""The saved conversations' list is refreshed often (every title change, every delete), on
the GUI thread: a refresh reads only the files that changed since the last one, and still
shows every change, addition, removal and damage."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.conversation.transcript import saved
from app.conversation.transcript.entries import TranscriptEntry
from app.conversation.transcript.export import TranscriptHeader
from app.conversation.transcript.saved import ConversationStore

T0 = 1_790_000_000.0


def _save(store: ConversationStore, conversation_id: str, said: str, started: float) -> Path:
    entry = TranscriptEntry(1, "user", said, started, origin="session-1")
    return store.save(TranscriptHeader(conversation_id=conversation_id, started=started),
                      [entry])


@pytest.fixture()
def reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The transcripts the store parsed (the real parser runs; each call is noted)."""
    parsed: list[str] = []
    real = saved.read_transcript

    def counted(text: str):
        header, entries = real(text)
        parsed.append(header.conversation_id)
        return header, entries

    monkeypatch.setattr(saved, "read_transcript", counted)
    return parsed


def test_a_refresh_reads_only_what_changed(tmp_path: Path, reads: list[str]) -> None:
    store = ConversationStore(tmp_path)
    for number in range(5):
        _save(store, f"c{number}", f"question {number}", T0 + number)
    assert [s.title for s in store.list()] == [f"question {n}" for n in (4, 3, 2, 1, 0)]
    assert sorted(reads) == [f"c{n}" for n in range(5)]

    reads.clear()
    assert len(store.list()) == 5
    assert reads == []  # nothing changed, nothing read

    _save(store, "c2", "asked again, longer", T0 + 2)
    assert [s.title for s in store.list()][2] == "asked again, longer"
    assert reads == ["c2"]


def test_additions_removals_and_damage_still_show(tmp_path: Path, reads: list[str]) -> None:
    store = ConversationStore(tmp_path)
    _save(store, "kept", "kept", T0)
    gone = _save(store, "gone", "gone", T0 + 1)
    damaged = _save(store, "damaged", "fine at first", T0 + 2)
    assert {s.conversation_id for s in store.list()} == {"kept", "gone", "damaged"}

    gone.unlink()
    damaged.write_text("{ not a transcript", encoding="utf-8")
    _save(store, "new", "new one", T0 + 3)
    assert [s.conversation_id for s in store.list()] == ["new", "kept"]
