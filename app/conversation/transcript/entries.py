"""What the transcript shows, as plain data: one entry per utterance, span, tool call, notice
or pending LLM request. Made from pipeline events by the transcript builder (session thread),
drawn by the panel, saved by the conversation store: it lives below all of them.

Entries are immutable; an utterance that grows (the model's words, the user's partial
transcript) is replaced by a new entry with the same `key`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

EntryKind = Literal["user", "assistant", "span", "tool", "notice", "thinking"]


@dataclass(frozen=True)
class SpanContext:
    """Where an injected span stands in the speech model's context window."""

    positions: int  # positions the span occupies (wrapping included)
    in_window: int  # of those, how many are still inside the window (0: it slid out)
    window: int  # the model's context window, in positions
    lost: str = ""  # why the model no longer holds it, when not by sliding out (in_window 0)

    @property
    def share(self) -> float:
        """The part of the window the span uses now (0 to 1)."""
        return self.in_window / self.window if self.window else 0.0


@dataclass(frozen=True)
class TranscriptEntry:
    entry_id: int  # unique within its origin; grows in the order entries were made
    kind: EntryKind
    text: str
    wall_time: float  # time.time() when it happened (shown as a local timestamp)
    conversation_s: float | None = None  # seconds into the conversation (frame time)
    source: str = ""  # spans: "typed", "dropped file: notes.txt", "llm+web_search", ...
    landed_frame: int | None = None  # spans: the frame before which its last chunk landed
    detail: str = ""  # tools and spans: what happened to it; notices: severity
    final: bool = True  # False while an utterance is still growing
    # Who numbered the entry: one transcript builder (one conversation session), or the
    # window. Sessions number from 1, so the pair `key` is the identity, unique for the
    # app's lifetime and across saved conversations.
    origin: str = ""
    context: SpanContext | None = None  # spans, once landed: their share of the window
    # Spans whose text the model read only the start of: how many characters that is (the
    # bubble shows all of `text` and marks the part read).
    read_chars: int | None = None

    @property
    def key(self) -> tuple[str, int]:
        return (self.origin, self.entry_id)


STOPPED = "the conversation stopped"
# How a span that has not landed begins its detail: the first part of it says where it stands.
QUEUED = "queued: waiting for the speech model"
READING = "being read by the speech model"


def closed(entry: TranscriptEntry, reason: str = STOPPED) -> TranscriptEntry:
    """What an entry that was still open becomes when its conversation ends: the growing
    utterance is final, a pending LLM request is cancelled, a span that never landed says so.
    Final entries come back unchanged."""
    if entry.final:
        return entry
    if entry.kind == "thinking":
        return replace(entry, kind="notice", detail="info", final=True,
                       text=f"The request about {entry.text} was cancelled: {reason}")
    if entry.kind == "span":
        state, _, rest = entry.detail.partition("; ")
        if state == QUEUED:
            state = f"not injected: {reason}"
        elif state == READING:
            state = f"only partly read: {reason}"
        else:
            state, rest = f"not injected: {reason}", entry.detail
        return replace(entry, detail="; ".join(p for p in (state, rest) if p), final=True)
    return replace(entry, final=True)


READ_MARK = "▲ the model read up to here; what follows it did not read ▼"


def read_split(entry: TranscriptEntry) -> tuple[str, str] | None:
    """A span whose text the model read only the start of: (the part read, the rest), cut
    at `read_chars`; None when it read all of it (or it is not a span)."""
    read = entry.read_chars
    if entry.kind != "span" or read is None or not 0 <= read < len(entry.text):
        return None
    return entry.text[:read], entry.text[read:]
