"""Transcript export: JSON round trips exactly, Markdown reads well and keeps span provenance."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

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


def test_markdown_has_every_text_the_span_provenance_and_timestamps(qapp) -> None:
    entries = sample_entries()
    markdown = to_markdown(entries)
    read = rendered(markdown)
    texts = [block.text for block in read]
    for entry in entries:
        for line in entry.text.splitlines():
            assert any(line in text for text in texts), line
    assert markdown.startswith("# Conversation transcript")
    assert "**You**" in markdown and "**Assistant**" in markdown
    # spans are blockquotes naming their source and landing frame
    quoted = [block.text for block in read if block.quote_level == 1]
    assert any("LLM via web_search" in text and "landed before frame 61" in text
               for text in quoted)
    assert "Wind: light, from the north." in quoted
    assert any("notes.txt" in text and "not landed yet" in text for text in quoted)
    assert "+0:04.8" in markdown and "+1:02:05.0" in markdown  # conversation clock
    assert "_(partial)_" in markdown
    assert "3 results, 1240 chars" in markdown


@dataclass(frozen=True)
class ReadBlock:
    """A paragraph (or line) of a Markdown document as a reader sees it rendered."""

    text: str
    quote_level: int
    heading: int
    listed: bool
    marked: tuple[str, ...]  # what in it is bold, emphasised, code, a link (not to itself)


def rendered(markdown: str) -> list[ReadBlock]:
    """`markdown` through a CommonMark reader (Qt's, md4c with GitHub's extensions)."""
    from PySide6.QtGui import QFont, QTextDocument, QTextFormat

    document = QTextDocument()
    document.setMarkdown(markdown)
    blocks: list[ReadBlock] = []
    block = document.begin()
    while block.isValid():
        fmt = block.blockFormat()
        marked = []
        it = block.begin()
        while not it.atEnd():
            fragment = it.fragment()
            char = fragment.charFormat()
            # A bare address is linked to itself (GitHub's autolinks): its text is kept.
            linked = char.isAnchor() and char.anchorHref() != fragment.text()
            if (char.fontWeight() > QFont.Weight.Normal or char.fontItalic() or linked
                    or (char.fontUnderline() and not char.isAnchor())
                    or char.fontFixedPitch() or char.fontStrikeOut()):
                marked.append(fragment.text())
            it += 1
        level = fmt.property(QTextFormat.Property.BlockQuoteLevel)
        for line in block.text().replace("\u00a0", " ").split("\u2028"):
            blocks.append(ReadBlock(line, int(level or 0), fmt.headingLevel(),
                                    block.textList() is not None, tuple(marked)))
        block = block.next()
    return blocks


LOOKS_LIKE_MARKDOWN = ("> a line the model said, not a span\n# not a heading\n- not a list\n"
                       "1. not a list either\n**not bold** _nor this_ `nor code` <b>no html</b> "
                       "[no link](http://example.org) a | b\n    not code\n---\n===\n"
                       "| a | b |\n|---|---|")


def test_the_models_text_reads_as_itself_not_as_markdown(qapp) -> None:
    """Issue 35, item 14: the Markdown export wrote the model's words as they came, so a
    line of its answer starting with ">" read as one of the export's spans (and "#" as a
    heading, "**" as bold, "<b>" as HTML). Read back by a CommonMark reader, every line of
    the model's, the user's and a span's text is itself, in its place: no quote, heading,
    list, emphasis, link or code of its own."""
    said = [TranscriptEntry(1, "assistant", LOOKS_LIKE_MARKDOWN, T0, 1.0),
            TranscriptEntry(2, "user", LOOKS_LIKE_MARKDOWN, T0 + 1, 2.0),
            TranscriptEntry(3, "span", LOOKS_LIKE_MARKDOWN, T0 + 2, 3.0, source="typed",
                            landed_frame=40)]
    read = rendered(to_markdown(said))
    lines = LOOKS_LIKE_MARKDOWN.split("\n")
    starts = [i for i, block in enumerate(read) if block.text == lines[0]]
    assert len(starts) == len(said), [block.text for block in read]  # each line its own
    for entry, level, start in zip(said, (0, 0, 1), starts, strict=True):
        shown = read[start:start + len(lines)]
        assert [block.text for block in shown] == lines, entry.kind
        for block in shown:
            assert (block.quote_level, block.heading, block.listed, block.marked) == \
                (level, 0, False, ()), (entry.kind, block)
    spans = [block for block in read if block.text.startswith("Injected span")]
    assert len(spans) == 1  # the one real span, and no other


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
