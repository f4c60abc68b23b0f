"""Turning transcript entries into text: plain text (clipboard), Markdown and JSON (files).

Pure functions with no Qt, so the panel, the main window and a headless export share one
wording of timestamps, labels and span provenance, and the tests need no widgets.
JSON is the lossless format (`from_json(to_json(x)) == x`); Markdown is for people.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, fields
from pathlib import Path
from typing import get_args

from app.ui.transcript_entries import EntryKind, TranscriptEntry

JSON_FORMAT = "contextspan-transcript"
JSON_VERSION = 1

KIND_LABELS: dict[str, str] = {
    "user": "You",
    "assistant": "Assistant",
    "span": "Injected span",
    "tool": "Tool call",
    "notice": "Notice",
}
_KINDS: frozenset[str] = frozenset(get_args(EntryKind))


def format_clock(wall_time: float) -> str:
    """Local wall-clock time of day; the date is left to the export header to keep rows short."""
    return time.strftime("%H:%M:%S", time.localtime(wall_time))


def format_conversation_time(seconds: float | None) -> str:
    """`+m:ss.s` (or `+h:mm:ss.s`) into the conversation: the frame clock, not the wall clock,
    which is what lines an entry up with the audio."""
    if seconds is None:
        return ""
    sign = "-" if seconds < 0 else "+"
    tenths = round(abs(seconds) * 10)
    minutes, tenth_seconds = divmod(tenths, 600)
    hours, minutes = divmod(minutes, 60)
    sec = f"{tenth_seconds // 10:02d}.{tenth_seconds % 10}"
    if hours:
        return f"{sign}{hours}:{minutes:02d}:{sec}"
    return f"{sign}{minutes}:{sec}"


def format_timestamps(entry: TranscriptEntry) -> str:
    """Both clocks of an entry, e.g. `12:03:04 · +1:23.4`."""
    conversation = format_conversation_time(entry.conversation_s)
    clock = format_clock(entry.wall_time)
    return f"{clock} · {conversation}" if conversation else clock


def describe_source(source: str) -> str:
    """Where a span came from, worded for a reader (the raw source string stays in JSON)."""
    if not source:
        return "unknown source"
    if source == "typed":
        return "text you typed"
    if source.startswith("llm+"):
        return f"LLM via {source[4:]}"
    return source


def describe_landing(entry: TranscriptEntry) -> str:
    """The span's landing point in frames, which is what ties it to what the voice said next."""
    if entry.landed_frame is None:
        return "not landed yet"
    return f"landed before frame {entry.landed_frame}"


def entry_heading(entry: TranscriptEntry) -> str:
    """The label line of an entry without timestamps, shared by every text form."""
    label = KIND_LABELS.get(entry.kind, entry.kind)
    if entry.kind == "span":
        return f"{label} from {describe_source(entry.source)}, {describe_landing(entry)}"
    if entry.kind == "notice" and entry.detail:
        return f"{label} ({entry.detail})"
    return label


def entry_to_plain_text(entry: TranscriptEntry) -> str:
    """One entry as clipboard text: `[time] Label: text`, a tool's detail on the next line."""
    partial = " (partial)" if not entry.final else ""
    text = f"[{format_timestamps(entry)}] {entry_heading(entry)}{partial}: {entry.text}"
    if entry.kind == "tool" and entry.detail:
        text += f"\n    {entry.detail}"
    return text


def to_plain_text(entries: Iterable[TranscriptEntry]) -> str:
    """Entries as plain text, one paragraph each, for the clipboard."""
    return "\n".join(entry_to_plain_text(entry) for entry in entries)


def _blockquote(text: str) -> str:
    return "\n".join(f"> {line}" if line else ">" for line in text.splitlines() or [""])


def _markdown_entry(entry: TranscriptEntry) -> str:
    stamps = format_timestamps(entry)
    partial = " _(partial)_" if not entry.final else ""
    label = KIND_LABELS.get(entry.kind, entry.kind)
    if entry.kind == "span":
        head = (
            f"> **{label}** from `{entry.source or 'unknown'}` ({describe_source(entry.source)})"
            f" · {describe_landing(entry)} · {stamps}{partial}"
        )
        return f"{head}\n>\n{_blockquote(entry.text)}"
    if entry.kind == "tool":
        body = f"**{label}** · {stamps}{partial}\n\n`{entry.text}`"
        if entry.detail:
            body += f"\n\n{entry.detail}"
        return body
    if entry.kind == "notice":
        severity = f" ({entry.detail})" if entry.detail else ""
        return f"_{label}{severity} · {stamps}: {entry.text}_"
    return f"**{label}** · {stamps}{partial}\n\n{entry.text}"


def to_markdown(entries: Sequence[TranscriptEntry], title: str = "Conversation transcript") -> str:
    """A readable Markdown document: bold speaker labels with both clocks, spans as blockquotes
    carrying their source and landing frame, so a reader sees what the voice was told and when."""
    lines = [f"# {title}", ""]
    if entries:
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(entries[0].wall_time))
        lines += [f"_Started {started} (local time) · {len(entries)} entries_", ""]
    for entry in entries:
        lines += [_markdown_entry(entry), ""]
    return "\n".join(lines)


def to_json(entries: Iterable[TranscriptEntry]) -> str:
    """Lossless JSON: every field of every entry, in a versioned envelope."""
    payload = {
        "format": JSON_FORMAT,
        "version": JSON_VERSION,
        "entries": [asdict(entry) for entry in entries],
    }
    return json.dumps(payload, ensure_ascii=False, indent=1)


def _entry_from_dict(raw: object, position: int) -> TranscriptEntry:
    if not isinstance(raw, dict):
        raise ValueError(f"entry {position} is not an object")
    known = {f.name for f in fields(TranscriptEntry)}
    values = {key: value for key, value in raw.items() if key in known}  # newer fields: ignored
    missing = {"entry_id", "kind", "text", "wall_time"} - values.keys()
    if missing:
        raise ValueError(f"entry {position} lacks {sorted(missing)}")
    if values["kind"] not in _KINDS:
        raise ValueError(f"entry {position} has unknown kind {values['kind']!r}")
    if not isinstance(values["entry_id"], int) or isinstance(values["entry_id"], bool):
        raise ValueError(f"entry {position} has a non-integer entry_id")
    if not isinstance(values["text"], str):
        raise ValueError(f"entry {position} has non-text text")
    if not isinstance(values["wall_time"], int | float):
        raise ValueError(f"entry {position} has a non-numeric wall_time")
    values["wall_time"] = float(values["wall_time"])
    if isinstance(values.get("conversation_s"), int):
        values["conversation_s"] = float(values["conversation_s"])
    return TranscriptEntry(**values)


def from_json(text: str) -> list[TranscriptEntry]:
    """Entries back from `to_json` output; a malformed file raises ValueError, never half-loads."""
    try:
        payload = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON: {exc}") from exc
    if not isinstance(payload, dict) or payload.get("format") != JSON_FORMAT:
        raise ValueError("not a ContextSpan transcript")
    if payload.get("version") != JSON_VERSION:
        raise ValueError(f"unsupported transcript version {payload.get('version')!r}")
    raw_entries = payload.get("entries")
    if not isinstance(raw_entries, list):
        raise ValueError("transcript has no entry list")
    return [_entry_from_dict(raw, position) for position, raw in enumerate(raw_entries)]


def export_to_file(entries: Sequence[TranscriptEntry], path: str | os.PathLike[str]) -> Path:
    """Write Markdown (.md, .markdown) or JSON (.json), chosen by suffix.

    The file is written beside its target and renamed over it, so a crash or a full disk
    never leaves a half-written transcript where a good one was.
    """
    target = Path(path)
    suffix = target.suffix.lower()
    if suffix in (".md", ".markdown"):
        text = to_markdown(entries)
    elif suffix == ".json":
        text = to_json(entries)
    else:
        raise ValueError(f"cannot export to {suffix or 'a file without suffix'}: use .md or .json")
    handle, temp_name = tempfile.mkstemp(
        prefix=f".{target.name}.", suffix=".tmp", dir=target.parent
    )
    try:
        with os.fdopen(handle, "w", encoding="utf-8", newline="\n") as stream:
            stream.write(text)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temp_name, target)
    except BaseException:
        Path(temp_name).unlink(missing_ok=True)
        raise
    return target
