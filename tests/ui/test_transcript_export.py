"""Transcript export: JSON round trips exactly, Markdown reads well and keeps span provenance."""

from __future__ import annotations

import json
import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from dataclasses import replace
from pathlib import Path

import pytest

from app.conversation.transcript.entries import TranscriptEntry
from app.conversation.transcript.export import (
    export_to_file,
    format_conversation_time,
    from_json,
    to_json,
    to_markdown,
    to_plain_text,
)

T0 = 1_790_000_000.25


def sample_entries() -> list[TranscriptEntry]:
    return [
        TranscriptEntry(1, "notice", "Connected to the engine", T0, 0.0, detail="info"),
        TranscriptEntry(2, "user", "What's the weather in Lyon?", T0 + 2.125, 2.16),
        TranscriptEntry(3, "assistant", "Let me look.", T0 + 3.5, 3.44),
        TranscriptEntry(
            4, "tool", "web_search(query='Lyon weather')", T0 + 4, 3.92,
            detail="3 results, 1240 chars",
        ),
        TranscriptEntry(
            5, "span", "Lyon: sunny, 14 °C.\nWind: light, from the north.", T0 + 5, 4.8,
            source="llm+web_search", landed_frame=61,
        ),
        TranscriptEntry(
            6, "span", "My notes", T0 + 6, None, source="dropped file: notes.txt",
            landed_frame=None, final=False,  # still queued: it may land
        ),
        TranscriptEntry(7, "assistant", "Sunny, about fourteen", T0 + 7, 6.96, final=False),
        TranscriptEntry(8, "user", "Ünïcödé and *stars* and `ticks`", T0 + 9, 3725.05),
    ]


def test_json_round_trip_is_exact() -> None:
    entries = sample_entries()
    assert from_json(to_json(entries)) == entries
    assert from_json(to_json([])) == []


def test_json_is_a_versioned_envelope_with_every_field() -> None:
    payload = json.loads(to_json(sample_entries()))
    assert payload["format"] == "contextspan-transcript"
    assert payload["version"] == 2
    span = payload["entries"][4]
    assert span["source"] == "llm+web_search"
    assert span["landed_frame"] == 61
    assert payload["entries"][6]["final"] is False


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        json.dumps({"format": "other", "version": 1, "entries": []}),
        json.dumps({"format": "contextspan-transcript", "version": 99, "entries": []}),
        json.dumps({"format": "contextspan-transcript", "version": 1, "entries": [{"x": 1}]}),
        json.dumps(
            {
                "format": "contextspan-transcript",
                "version": 1,
                "entries": [{"entry_id": 1, "kind": "robot", "text": "", "wall_time": 0.0}],
            }
        ),
    ],
)
def test_from_json_rejects_what_it_did_not_write(text: str) -> None:
    with pytest.raises(ValueError):
        from_json(text)


def test_markdown_has_every_text_the_span_provenance_and_timestamps() -> None:
    entries = sample_entries()
    markdown = to_markdown(entries)
    for entry in entries:
        for line in entry.text.splitlines():
            assert line in markdown
    assert markdown.startswith("# Conversation transcript")
    assert "**You**" in markdown and "**Assistant**" in markdown
    # spans are blockquotes naming their source and landing frame
    span_block = [line for line in markdown.splitlines() if line.startswith(">")]
    assert any("LLM via web_search" in line and "landed before frame 61" in line
               for line in span_block)
    assert "> Wind: light, from the north." in span_block
    assert any("notes.txt" in line and "not landed yet" in line for line in span_block)
    assert "+0:04.8" in markdown and "+1:02:05.0" in markdown  # conversation clock
    assert "_(partial)_" in markdown
    assert "3 results, 1240 chars" in markdown


def test_conversation_time_format() -> None:
    assert format_conversation_time(None) == ""
    assert format_conversation_time(0.0) == "+0:00.0"
    assert format_conversation_time(83.44) == "+1:23.4"
    assert format_conversation_time(3725.05) == "+1:02:05.0"


def test_plain_text_has_one_line_per_entry_with_labels() -> None:
    text = to_plain_text(sample_entries()[:5])
    lines = text.splitlines()
    assert lines[1].endswith("You: What's the weather in Lyon?")
    assert "Injected span from LLM via web_search, landed before frame 61" in text
    assert "    3 results, 1240 chars" in text


@pytest.mark.parametrize("suffix", [".json", ".md", ".MARKDOWN"])
def test_export_to_file_by_suffix_replaces_atomically(tmp_path: Path, suffix: str) -> None:
    entries = sample_entries()
    target = tmp_path / f"talk{suffix}"
    target.write_text("old contents", encoding="utf-8")
    assert export_to_file(entries, target) == target
    text = target.read_text(encoding="utf-8")
    if suffix == ".json":
        assert from_json(text) == entries
    else:
        assert text == to_markdown(entries)
    assert sorted(p.name for p in tmp_path.iterdir()) == [target.name]  # no temp file left


def test_export_to_file_refuses_unknown_suffix(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        export_to_file(sample_entries(), tmp_path / "talk.txt")
    assert list(tmp_path.iterdir()) == []


def test_markdown_marks_where_the_model_stopped_reading_a_span() -> None:
    """Issue 28, item 14: the window marks where the model stopped reading a long paste;
    the Markdown export says the same at the same place, not only how many characters."""
    from app.conversation.transcript.entries import READ_MARK

    read, rest = "The part the model read. " * 4, "What it never read. " * 6
    span = TranscriptEntry(1, "span", read + rest, 1_790_000_000.0, 4.0, source="pasted text",
                           landed_frame=50, read_chars=len(read),
                           detail=f"the model read the first {len(read)} of "
                                  f"{len(read + rest)} characters")
    markdown = to_markdown([span])
    assert READ_MARK in markdown
    before, after = markdown.split(READ_MARK)
    assert read.strip() in before and rest.strip() not in before
    assert rest.strip() in after
    whole = replace(span, read_chars=None)
    assert READ_MARK not in to_markdown([whole])  # read whole: no mark
