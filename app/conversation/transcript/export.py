"""Turning transcript entries into text: plain text (clipboard), Markdown and JSON (files).

Pure functions with no Qt, so the panel, the main window, the conversation store and a
headless export share one wording of timestamps, labels and span provenance, and the tests
need no widgets. JSON is the lossless format (`from_json(to_json(x)) == x`, times to the
microsecond); Markdown is for people.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, fields, replace
from datetime import datetime
from pathlib import Path
from typing import Any, get_args

from app.conversation.transcript.entries import (
    READ_MARK,
    EntryKind,
    SpanContext,
    TranscriptEntry,
    read_split,
)
from app.conversation.transcript.markdown_text import code_span, escape_markdown
from app.display_text import visible_controls

JSON_FORMAT = "contextspan-transcript"
JSON_VERSION = 2  # 1: epoch-float times and no header (still read)
FILE_MODE = 0o600  # a transcript is private: what the user said, what was read to the model

KIND_LABELS: dict[str, str] = {
    "user": "You",
    "assistant": "Assistant",
    "span": "Injected span",
    "tool": "Tool call",
    "notice": "Notice",
    "thinking": "Asking the LLM",
}
_KINDS: frozenset[str] = frozenset(get_args(EntryKind))


@dataclass(frozen=True)
class TranscriptHeader:
    """What a saved transcript says about itself: which conversation, when it started, and
    what it ran on (empty strings where unknown)."""

    conversation_id: str = ""
    title: str = ""
    started: float | None = None  # time.time() the conversation started
    model: str = ""  # the speech model, as the status bar names it
    device: str = ""
    llm: str = ""  # e.g. "qwen3:4b on Ollama at http://127.0.0.1:11434", or "off"
    tools: tuple[str, ...] = ()
    # Everything it ran on, in the order used (a change appends; `model` … `tools` above are
    # the last of each): a conversation may span several sessions and settings changes.
    models: tuple[str, ...] = ()
    devices: tuple[str, ...] = ()  # "cuda on the server at http://…" for a server's model
    llms: tuple[str, ...] = ()
    tool_sets: tuple[tuple[str, ...], ...] = ()
    restarts: int = 0  # sessions after the first (each is marked in the transcript)


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


AUDIO_TIME_LABEL = "audio"  # names the frame clock's time where it stands beside the clock's


def format_timestamps(entry: TranscriptEntry) -> str:
    """Both clocks of an entry, the second one named, e.g. `12:03:04 · audio +1:23.4`: on a
    computer that cannot keep real time they drift apart, and two bare times would not say
    which is which."""
    conversation = format_conversation_time(entry.conversation_s)
    clock = format_clock(entry.wall_time)
    return f"{clock} · {AUDIO_TIME_LABEL} {conversation}" if conversation else clock


def explain_timestamps(entry: TranscriptEntry) -> str:
    """What each of an entry's times is, for a tooltip."""
    clock = format_clock(entry.wall_time)
    lines = [f"{clock}: the time of day it happened."]
    conversation = format_conversation_time(entry.conversation_s)
    if conversation:
        lines.append(f"{AUDIO_TIME_LABEL} {conversation}: where it is in the conversation's "
                     "audio, counted in the speech model's 80 ms frames; it falls behind the "
                     "clock when the computer cannot keep real time.")
    return "\n".join(lines)


def iso_time(wall_time: float) -> str:
    """ISO 8601 local time with its UTC offset, to the microsecond."""
    return datetime.fromtimestamp(wall_time).astimezone().isoformat(timespec="microseconds")


def parse_iso_time(text: str) -> float:
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        moment = moment.astimezone()  # naive: local time
    return moment.timestamp()


def describe_source(source: str) -> str:
    """Where a span came from, worded for a reader. The builder names the LLM when it knows
    it ("qwen3:4b on Ollama via web_search"); a bare "llm+tool" is worded here."""
    if not source:
        return "unknown source"
    if source == "typed":
        return "text you typed"
    if source == "llm":
        return "LLM"
    if source.startswith("llm+"):
        return f"LLM via {', '.join(source[4:].split('+'))}"
    return source


# What a closed span's detail begins with when it never landed whole (entries.closed and
# the transcript builder write them), and the label it gets instead of "Injected span".
_NEVER_LANDED = {"not injected": "Span not injected", "only partly read": "Span partly read"}


def _never_landed(entry: TranscriptEntry) -> str | None:
    """A finished span that did not land: its label; None for any other entry."""
    if entry.kind != "span" or entry.landed_frame is not None or not entry.final:
        return None
    state = entry.detail.partition("; ")[0]
    return next((label for start, label in _NEVER_LANDED.items() if state.startswith(start)),
                None)


def kind_label(entry: TranscriptEntry) -> str:
    """"You", "Injected span" …; a span is an "Injected span" only once it landed, and one
    that never landed says what became of it."""
    if entry.kind == "span" and entry.landed_frame is None:
        return _never_landed(entry) or "Span"
    return KIND_LABELS.get(entry.kind, entry.kind)


def describe_landing(entry: TranscriptEntry) -> str:
    """The span's landing point in frames, which is what ties it to what the voice said next;
    "" for one that will never land or never did, whose label and detail say why."""
    if entry.landed_frame is not None:
        return f"landed before frame {entry.landed_frame}"
    if _never_landed(entry) is not None:
        return ""
    if not entry.final:
        return "not landed yet"
    return "" if entry.detail else "never landed"


def span_meta(entry: TranscriptEntry) -> str:
    """Where a span came from and where it landed: `from LLM · landed before frame 40`."""
    landing = describe_landing(entry)
    source = f"from {describe_source(entry.source)}"
    return f"{source} · {landing}" if landing else source


def shown(entry: TranscriptEntry) -> TranscriptEntry:
    """The entry as it is drawn and written for people (the panel, Markdown, plain text):
    bidi controls in its text, source and detail made visible (app/display_text.py). The
    entry itself (and JSON) keeps the original; an entry without one comes back as it is."""
    text, source, detail = (visible_controls(entry.text), visible_controls(entry.source),
                            visible_controls(entry.detail))
    if text is entry.text and source is entry.source and detail is entry.detail:
        return entry
    return replace(entry, text=text, source=source, detail=detail)


def entry_heading(entry: TranscriptEntry) -> str:
    """The label line of an entry without timestamps, shared by every text form."""
    label = kind_label(entry)
    if entry.kind == "span":
        return f"{label} {span_meta(entry).replace(' · ', ', ')}"
    if entry.kind == "notice" and entry.detail:
        return f"{label} ({entry.detail})"
    return label


def shows_detail(entry: TranscriptEntry) -> bool:
    """Tools and spans carry what happened to them in `detail` (result size, truncation,
    positions); a notice's detail is its severity, shown in its label."""
    return entry.kind in ("tool", "span") and bool(entry.detail)


def entry_to_plain_text(entry: TranscriptEntry) -> str:
    """One entry as clipboard text: `[time] Label: text`, a tool's or span's detail on the
    next line."""
    entry = shown(entry)
    partial = " (partial)" if not entry.final else ""
    text = f"[{format_timestamps(entry)}] {entry_heading(entry)}{partial}: {entry.text}"
    if shows_detail(entry):
        text += f"\n    {entry.detail}"
    return text


def to_plain_text(entries: Iterable[TranscriptEntry]) -> str:
    """Entries as plain text, one paragraph each, for the clipboard."""
    return "\n".join(entry_to_plain_text(entry) for entry in entries)


def _blockquote(text: str) -> str:
    """Content as a blockquote's lines: escaped, so a line of it that starts with ">" is
    not a quote of its own (nor its "#" a heading)."""
    return "\n".join(f"> {line}" if line else ">"
                     for line in escape_markdown(text).splitlines() or [""])


def _markdown_entry(entry: TranscriptEntry) -> str:
    """One entry in Markdown. Every text that is content (the entry's words, its source and
    detail) is escaped: the export's own marks are the only Markdown in it."""
    entry = shown(entry)
    stamps = format_timestamps(entry)
    partial = " _(partial)_" if not entry.final else ""
    label = kind_label(entry)
    if entry.kind == "span":
        head = f"> **{label}** {escape_markdown(span_meta(entry))} · {stamps}{partial}"
        if entry.detail:
            head += f"\n> _{escape_markdown(' '.join(entry.detail.split()))}_"
        split = read_split(entry)
        if split is None:
            return f"{head}\n>\n{_blockquote(entry.text)}"
        # Where the model stopped reading, as the window marks it.
        read, unread = split
        return (f"{head}\n>\n{_blockquote(read)}\n>\n> _{READ_MARK}_\n>\n"
                f"{_blockquote(unread)}")
    if entry.kind == "tool":
        body = f"**{label}** · {stamps}{partial}\n\n{code_span(entry.text)}"
        if entry.detail:
            body += f"\n\n{escape_markdown(entry.detail)}"
        return body
    if entry.kind in ("notice", "thinking"):
        severity = (f" ({escape_markdown(entry.detail)})" if entry.kind == "notice"
                    and entry.detail else "")
        text = escape_markdown(" ".join(entry.text.split()))  # one emphasised line
        return f"_{label}{severity} · {stamps}: {text}_"
    return f"**{label}** · {stamps}{partial}\n\n{escape_markdown(entry.text)}"


def _started(entries: Sequence[TranscriptEntry], header: TranscriptHeader | None) -> float | None:
    if header is not None and header.started is not None:
        return header.started
    said = [e.wall_time for e in entries if e.kind != "notice"]
    return said[0] if said else (entries[0].wall_time if entries else None)


def _tool_set(tools: Sequence[str]) -> str:
    return ", ".join(tools) if tools else "none"


def _in_order(used: Sequence[str], last: str, separator: str = ", then ") -> str:
    """Every value used, in order ("A, then B"), or the single last one (older files)."""
    return separator.join(used) if used else last


def header_rows(header: TranscriptHeader) -> list[tuple[str, str]]:
    """What the conversation ran on, (name, value) each: every speech model, device, LLM and
    tool set it used, in order, and how often the model restarted."""
    tools = _in_order([_tool_set(t) for t in header.tool_sets], _tool_set(header.tools),
                      "; then ")
    rows = [("Speech model", _in_order(header.models, header.model)),
            ("Device", _in_order(header.devices, header.device)),
            ("LLM", _in_order(header.llms, header.llm)), ("Tools", tools)]
    if header.restarts:
        times = "once" if header.restarts == 1 else f"{header.restarts} times"
        rows.append(("Restarts", f"the speech model started again {times} (marked below)"))
    return [(name, visible_controls(value)) for name, value in rows if value]


def header_lines(header: TranscriptHeader) -> list[str]:
    """The header's rows as `- name: value` lines, as read (the saved conversation's window);
    Markdown escapes the values (to_markdown)."""
    return [f"- {name}: {value}" for name, value in header_rows(header)]


def to_markdown(entries: Sequence[TranscriptEntry], title: str | None = None,
                header: TranscriptHeader | None = None) -> str:
    """A readable Markdown document: bold speaker labels with both clocks, spans as blockquotes
    carrying their source, landing frame and truncation, so a reader sees what the voice was
    told and when. "Started" is the conversation's start (the header's), not the first
    notice's."""
    title = title or (header.title if header is not None and header.title else
                      "Conversation transcript")
    lines = [f"# {escape_markdown(' '.join(visible_controls(title).split()))}", ""]
    started = _started(entries, header)
    if started is not None:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started))
        lines += [f"_Started {stamp} (local time) · {len(entries)} entries_", ""]
    rows = header_rows(header) if header is not None else []
    if rows:
        lines += [*(f"- {name}: {escape_markdown(value)}" for name, value in rows), ""]
    for entry in entries:
        lines += [_markdown_entry(entry), ""]
    return "\n".join(lines)


def _entry_to_dict(entry: TranscriptEntry) -> dict[str, Any]:
    raw = asdict(entry)
    raw["time"] = iso_time(raw.pop("wall_time"))
    return raw


def _header_to_dict(header: TranscriptHeader) -> dict[str, Any]:
    raw = asdict(header)
    raw["started"] = iso_time(header.started) if header.started is not None else None
    raw["tools"] = list(header.tools)
    for name in ("models", "devices", "llms"):
        raw[name] = list(raw[name])
    raw["tool_sets"] = [list(tools) for tools in header.tool_sets]
    return raw


def to_json(entries: Iterable[TranscriptEntry], header: TranscriptHeader | None = None) -> str:
    """Lossless JSON: every field of every entry (times as ISO 8601 with the offset), in a
    versioned envelope whose header names the conversation and what it ran on."""
    payload = {
        "format": JSON_FORMAT,
        "version": JSON_VERSION,
        "header": _header_to_dict(header or TranscriptHeader()),
        "entries": [_entry_to_dict(entry) for entry in entries],
    }
    return json.dumps(payload, ensure_ascii=False, indent=1)


def _time_value(values: dict[str, Any], position: int) -> float:
    if "time" in values:
        raw = values.pop("time")
        if not isinstance(raw, str):
            raise ValueError(f"entry {position} has a non-text time")
        try:
            return parse_iso_time(raw)
        except ValueError as exc:
            raise ValueError(f"entry {position} has a bad time: {exc}") from exc
    raw = values.get("wall_time")
    if not isinstance(raw, int | float) or isinstance(raw, bool):
        raise ValueError(f"entry {position} has a non-numeric wall_time")
    return float(raw)


def _entry_from_dict(raw: object, position: int) -> TranscriptEntry:
    if not isinstance(raw, dict):
        raise ValueError(f"entry {position} is not an object")
    known = {f.name for f in fields(TranscriptEntry)} | {"time"}
    values = {key: value for key, value in raw.items() if key in known}  # newer fields: ignored
    missing = {"entry_id", "kind", "text"} - values.keys()
    if missing or not values.keys() & {"time", "wall_time"}:
        raise ValueError(f"entry {position} lacks {sorted(missing) or ['time']}")
    if values["kind"] not in _KINDS:
        raise ValueError(f"entry {position} has unknown kind {values['kind']!r}")
    if not isinstance(values["entry_id"], int) or isinstance(values["entry_id"], bool):
        raise ValueError(f"entry {position} has a non-integer entry_id")
    if not isinstance(values["text"], str):
        raise ValueError(f"entry {position} has non-text text")
    values["wall_time"] = _time_value(values, position)
    if isinstance(values.get("conversation_s"), int):
        values["conversation_s"] = float(values["conversation_s"])
    context = values.get("context")
    if context is not None:
        try:
            values["context"] = SpanContext(**context)
        except TypeError as exc:
            raise ValueError(f"entry {position} has a bad context: {exc}") from exc
    return TranscriptEntry(**values)


def _header_from_dict(raw: object) -> TranscriptHeader:
    if not isinstance(raw, dict):
        return TranscriptHeader()
    started = raw.get("started")
    tools = raw.get("tools")

    def texts(name: str) -> tuple[str, ...]:
        values = raw.get(name)
        return tuple(str(v) for v in values) if isinstance(values, list) else ()

    tool_sets = raw.get("tool_sets")
    restarts = raw.get("restarts")
    return TranscriptHeader(
        conversation_id=str(raw.get("conversation_id") or ""),
        title=str(raw.get("title") or ""),
        started=parse_iso_time(started) if isinstance(started, str) else None,
        model=str(raw.get("model") or ""),
        device=str(raw.get("device") or ""),
        llm=str(raw.get("llm") or ""),
        tools=tuple(str(t) for t in tools) if isinstance(tools, list) else (),
        models=texts("models"), devices=texts("devices"), llms=texts("llms"),
        tool_sets=tuple(tuple(str(t) for t in tools) for tools in tool_sets
                        if isinstance(tools, list)) if isinstance(tool_sets, list) else (),
        restarts=restarts if isinstance(restarts, int) and not isinstance(restarts, bool)
        and restarts >= 0 else 0,
    )


def read_transcript(text: str) -> tuple[TranscriptHeader, list[TranscriptEntry]]:
    """Header and entries back from `to_json` output (version 1 files too); a malformed file
    raises ValueError, never half-loads."""
    try:
        payload = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON: {exc}") from exc
    if not isinstance(payload, dict) or payload.get("format") != JSON_FORMAT:
        raise ValueError("not a ContextSpan transcript")
    if payload.get("version") not in (1, JSON_VERSION):
        raise ValueError(f"unsupported transcript version {payload.get('version')!r}")
    raw_entries = payload.get("entries")
    if not isinstance(raw_entries, list):
        raise ValueError("transcript has no entry list")
    try:
        header = _header_from_dict(payload.get("header"))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"bad header: {exc}") from exc
    return header, [_entry_from_dict(raw, position) for position, raw in enumerate(raw_entries)]


def from_json(text: str) -> list[TranscriptEntry]:
    """Entries back from `to_json` output; a malformed file raises ValueError."""
    return read_transcript(text)[1]


def write_private(path: str | os.PathLike[str], text: str) -> Path:
    """Write `text` to `path`, readable by its owner only (0600).

    The file is written beside its target and renamed over it, so a crash or a full disk
    never leaves a half-written transcript where a good one was.
    """
    target = Path(path)
    handle, temp_name = tempfile.mkstemp(
        prefix=f".{target.name}.", suffix=".tmp", dir=target.parent
    )
    try:
        os.chmod(temp_name, FILE_MODE)  # mkstemp's mode already; said here, not assumed
        with os.fdopen(handle, "w", encoding="utf-8", newline="\n") as stream:
            stream.write(text)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temp_name, target)
    except BaseException:
        Path(temp_name).unlink(missing_ok=True)
        raise
    return target


def export_to_file(entries: Sequence[TranscriptEntry], path: str | os.PathLike[str],
                   header: TranscriptHeader | None = None) -> Path:
    """Write Markdown (.md, .markdown) or JSON (.json), chosen by suffix, mode 0600."""
    target = Path(path)
    suffix = target.suffix.lower()
    if suffix in (".md", ".markdown"):
        text = to_markdown(entries, header=header)
    elif suffix == ".json":
        text = to_json(entries, header)
    else:
        raise ValueError(f"cannot export to {suffix or 'a file without suffix'}: use .md or .json")
    return write_private(target, text)
