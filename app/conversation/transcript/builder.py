"""Turn pipeline events into transcript entries (plain data for the transcript panel).

The model's words and the user's partial transcript grow in place: successive pieces
update one entry until a pause (or the user's end of turn) closes it. An LLM request is one
entry too: "asking the LLM" while it is pending, then the tool call, the span, or why there
is none. A landed span keeps saying how much of the model's context window it still uses.

Each builder (one per conversation session) stamps its entries with an origin of its own,
so entries of different sessions never share an identity (`TranscriptEntry.key`). One
thread writes it, the session's (typed questions included): it needs no lock.
"""

from __future__ import annotations

import itertools
import math
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from app.asr.events import AsrError, AsrFinal, AsrPartial
from app.conversation.transcript.entries import EntryKind, SpanContext, TranscriptEntry
from app.engine import events as ev
from app.frames import FRAME_S
from app.orchestrator import events as oe

ASSISTANT_PAUSE_FRAMES = 12  # ~1 s without words closes the model's utterance
_BACKEND_NAMES = {"ollama": "Ollama", "openai": "an OpenAI-compatible server"}


def llm_label(backend: str, model: str = "") -> str:
    """How a span's source names the LLM: "qwen3:4b on Ollama" (backend as in settings)."""
    name = _BACKEND_NAMES.get(backend, backend)
    return f"{model} on {name}" if model else name


class TranscriptBuilder:
    def __init__(self, clock: Callable[[], float] = time.time, origin: str | None = None,
                 llm: str = "") -> None:
        """`llm`: how spans from the LLM name it (see `llm_label`); "" words them "LLM"."""
        self._clock = clock
        self.origin = origin if origin is not None else uuid.uuid4().hex[:12]
        self._llm = llm
        self._ids = itertools.count(1)
        self._last_id = 0
        self._assistant: TranscriptEntry | None = None
        self._assistant_last_frame = -1
        self._user: TranscriptEntry | None = None
        self._spans: dict[int, TranscriptEntry] = {}  # span id -> its entry, until it lands
        self._span_text: dict[int, tuple[str, str]] = {}
        self._retrievals: dict[int, TranscriptEntry] = {}  # <ret> frame -> its entry
        self._thinking: dict[int, TranscriptEntry] = {}  # turn id -> its pending entry
        # The context window: positions so far, and where each landed span's chunks are.
        self._total = 0
        self._window = 0
        self._chunks: dict[int, list[tuple[int, int]]] = {}  # span id -> (first, length)
        self._in_window: dict[int, TranscriptEntry] = {}  # landed spans still (partly) inside

    def set_llm(self, label: str) -> None:
        """The LLM changed during the conversation: spans from now on name the new one."""
        self._llm = label

    def remember_span(self, span_id: int, text: str, source: str) -> None:
        """Spans the UI queued itself (typed, dropped): their text and source for display."""
        self._span_text[span_id] = (text, source)

    def _new(self, kind: EntryKind, text: str, now: float, **fields: Any) -> TranscriptEntry:
        return TranscriptEntry(self._next_id(), kind, text, now, origin=self.origin, **fields)

    def _next_id(self) -> int:
        self._last_id = next(self._ids)
        return self._last_id

    def _below(self, entry: TranscriptEntry) -> bool:
        """Something was added to the transcript after `entry` (the model spoke on)."""
        return self._last_id > entry.entry_id

    def entries_for(self, event: object) -> list[TranscriptEntry]:
        now = self._clock()
        if isinstance(event, ev.TextPiece):
            return self._assistant_piece(event, now)
        if isinstance(event, ev.FrameStats):
            return self._frame(event)
        if isinstance(event, ev.SpanChunkInjected):
            self._chunks.setdefault(event.span_id, []).append((self._total, event.k))
            self._total += event.k
            return []
        if isinstance(event, AsrPartial):
            entry_id = (self._user.entry_id if self._user and not self._user.final
                        else self._next_id())
            self._user = TranscriptEntry(entry_id, "user", event.text, now,
                                         conversation_s=event.start_s, final=False,
                                         origin=self.origin)
            return [self._user]
        if isinstance(event, AsrFinal):
            if not event.text.strip():
                return []
            out = self._close_assistant()
            entry_id = (self._user.entry_id if self._user and not self._user.final
                        else self._next_id())
            self._user = TranscriptEntry(entry_id, "user", event.text, now,
                                         conversation_s=event.start_s,
                                         detail=f"end of turn by {event.detected_by}",
                                         origin=self.origin)
            if not event.missed_frames:
                return [*out, self._user]
            lost_s = event.missed_frames * FRAME_S
            return [*out, self._user, self._notice(
                f"Speech recognition missed {lost_s:.1f} s of audio while hearing this turn "
                f"(the computer is too busy): words may be missing from it.", now, "warning")]
        if isinstance(event, ev.SpanAccepted):
            return self._span_accepted(event, now)
        if isinstance(event, ev.SpanInjected):
            return self._span_injected(event, now)
        if isinstance(event, (ev.EngineError, AsrError)):
            return [self._notice(event.message, now, "error" if event.fatal else "warning")]
        if isinstance(event, ev.SpanRejected):
            return [self._notice(f"A span from {self._name_source(event.source)} was not "
                                 f"injected: {event.reason}", now, "warning")]
        return self._turn_entries(event, now) or self._retrieval_entries(event, now)

    # ---- an LLM request, from "asking" to what came of it --------------------------------

    def _turn_entries(self, event: object, now: float) -> list[TranscriptEntry]:
        if isinstance(event, oe.TurnStarted):
            entry = self._new("thinking", f"“{event.question}”", now, detail=event.trigger,
                              final=False)
            self._thinking[event.turn_id] = entry
            return [entry]
        if isinstance(event, oe.ToolCalled):
            status = "ok" if event.ok else f"failed: {event.error}"
            args = ", ".join(f"{k}={v!r}" for k, v in event.arguments.items())
            detail = f"{status}; {event.chars} characters" + (" (truncated)"
                                                               if event.truncated else "")
            pending = self._thinking.get(event.turn_id)
            tool = self._become(pending, "tool", f"{event.tool}({args})", now,
                                source=event.source, detail=detail)
            if pending is None:
                return [tool]
            # The request goes on after its tool: "asking" moves below the call.
            self._thinking[event.turn_id] = self._new("thinking", pending.text, now,
                                                      detail=pending.detail, final=False)
            return [tool, self._thinking[event.turn_id]]
        if isinstance(event, oe.SpanQueued):
            return self._span_queued(event, now)
        if isinstance(event, oe.TurnFailed):
            return [self._end_turn(event.turn_id, f"The LLM could not answer: {event.message}",
                                   now, "warning")]
        if isinstance(event, oe.TurnCancelled):
            if event.turn_id not in self._thinking:
                return []
            return [self._end_turn(event.turn_id, f"The request about "
                                   f"{self._thinking[event.turn_id].text} was cancelled: "
                                   f"{event.reason}", now, "info")]
        if isinstance(event, oe.TurnLatency) and event.turn_id in self._thinking:
            return [self._end_turn(event.turn_id, "The LLM had nothing to add.", now, "info")]
        return []

    def _become(self, pending: TranscriptEntry | None, kind: EntryKind, text: str, now: float,
                **fields: Any) -> TranscriptEntry:
        """The pending request's entry turns into what came of it (same key), or a new
        entry when there was none on screen."""
        if pending is None:
            return self._new(kind, text, now, **fields)
        changes = {"kind": kind, "text": text, "wall_time": now, "final": True, "detail": ""}
        return replace(pending, **{**changes, **fields})

    def _end_turn(self, turn_id: int, message: str, now: float,
                  severity: str) -> TranscriptEntry:
        return self._become(self._thinking.pop(turn_id, None), "notice", message, now,
                            detail=severity)

    def _span_queued(self, event: oe.SpanQueued, now: float) -> list[TranscriptEntry]:
        pending = self._thinking.pop(event.turn_id, None)
        if event.span_id in self._spans or pending is None or self._below(pending):
            # The span gets an entry of its own, at the end: the engine took it first (its
            # SpanAccepted came before this), the request was not on screen, or the model
            # spoke on meanwhile, and a span reads where it reached the voice, not above
            # words said before it landed.
            self._span_text.setdefault(event.span_id, (event.text, event.source))
            if pending is None:
                return []
            return [self._become(pending, "notice", f"The LLM answered {pending.text}: its "
                                 "span is below, where it reached the voice.", now,
                                 detail="info")]
        entry = self._become(pending, "span", event.text, now,
                             source=self._name_source(event.source), detail="queued",
                             final=False)
        self._spans[event.span_id] = entry
        return [entry]

    # ---- spans ---------------------------------------------------------------------------

    def _name_source(self, source: str) -> str:
        """`llm+web_search` -> "qwen3:4b on Ollama via web_search" when the LLM is known."""
        if not self._llm or not (source == "llm" or source.startswith("llm+")):
            return source
        tools = source.split("+")[1:]
        return f"{self._llm} via {', '.join(tools)}" if tools else self._llm

    def _span_accepted(self, event: ev.SpanAccepted, now: float) -> list[TranscriptEntry]:
        detail = "queued"
        if event.truncated:
            detail = (f"truncated: kept {event.kept_content_tokens:,} of "
                      f"{event.original_content_tokens:,} tokens")
        entry = self._spans.get(event.span_id)
        if entry is None:
            text, source = self._span_text.get(event.span_id, (event.text, event.source))
            pending = self._only_pending_llm_request(source)
            if pending is not None:  # its SpanQueued is still on its way: take its entry
                self._thinking = {t: e for t, e in self._thinking.items() if e is not pending}
                entry = self._become(pending, "span", text, now, final=False)
            else:
                entry = self._new("span", text, now, final=False)
            entry = replace(entry, source=self._name_source(source))
        entry = replace(entry, detail=detail)
        self._spans[event.span_id] = entry
        return [entry]

    def _only_pending_llm_request(self, source: str) -> TranscriptEntry | None:
        if not (source == "llm" or source.startswith("llm+")) or len(self._thinking) != 1:
            return None
        pending = next(iter(self._thinking.values()))
        return None if self._below(pending) else pending

    def _span_injected(self, event: ev.SpanInjected, now: float) -> list[TranscriptEntry]:
        entry = self._spans.pop(event.span_id, None)
        if entry is None:
            return []
        out = self._close_assistant()
        parts = [entry.detail] if entry.detail.startswith("truncated") else []
        chunks = "1 chunk" if event.chunks == 1 else f"{event.chunks} chunks"
        parts.append(f"{event.positions:,} positions in {chunks}")
        if event.origin_frame is not None:
            after = (event.last_frame - event.origin_frame) * FRAME_S
            parts.append(f"landed {after:.2f} s after <ret>")
        landed = replace(entry, final=True, landed_frame=event.last_frame,
                         conversation_s=event.last_frame * FRAME_S, detail="; ".join(parts),
                         wall_time=now, context=self._context_of(event.span_id,
                                                                 event.positions))
        if landed.context is not None and landed.context.in_window:
            self._in_window[event.span_id] = landed
        return [*out, landed]

    # ---- the context window --------------------------------------------------------------

    def _context_of(self, span_id: int, positions: int) -> SpanContext | None:
        if not self._window:
            return None
        start = self._total - self._window
        chunks = self._chunks.get(span_id) or [(self._total - positions, positions)]
        inside = sum(max(0, first + length - max(first, start)) for first, length in chunks)
        return SpanContext(positions=positions, in_window=min(positions, inside),
                           window=self._window)

    def _frame(self, stats: ev.FrameStats) -> list[TranscriptEntry]:
        out: list[TranscriptEntry] = []
        if (self._assistant is not None and not self._assistant.final
                and stats.frame_index - self._assistant_last_frame > ASSISTANT_PAUSE_FRAMES):
            self._assistant = replace(self._assistant, final=True)
            out.append(self._assistant)
        usage = stats.context
        self._window = usage.window
        self._total = usage.frame_positions + usage.span_positions
        for span_id, entry in list(self._in_window.items()):
            old = entry.context
            assert old is not None
            new = self._context_of(span_id, old.positions)
            if new is None or _tenths(new) == _tenths(old):
                continue
            entry = replace(entry, context=new)
            out.append(entry)
            if new.in_window:
                self._in_window[span_id] = entry
            else:  # slid out of the window: it stays out
                del self._in_window[span_id]
                self._chunks.pop(span_id, None)
        return out

    # ---- the model's own <ret> -------------------------------------------------------------

    def _retrieval_entries(self, event: object, now: float) -> list[TranscriptEntry]:
        """The model's own <ret>: one entry per retrieval, updated as it goes on."""
        def update(ret_frame: int, text: str, severity: str = "info") -> list[TranscriptEntry]:
            entry = self._retrievals.get(ret_frame)
            if entry is None:
                entry = self._new("notice", "", now, conversation_s=ret_frame * FRAME_S,
                                  detail=severity)
            entry = replace(entry, text=text, detail=severity)
            self._retrievals[ret_frame] = entry
            return [entry]

        def at(frame: int) -> str:
            return f"at {frame * FRAME_S:.1f} s"

        if isinstance(event, ev.RetToken):
            return update(event.frame_index,
                          f"The model asked for information (<ret>) {at(event.frame_index)}")
        if isinstance(event, oe.RetrievalQuestion):
            how = {"cache": "your last words", "wait": "what you were saying",
                   "window": "the last seconds of speech"}.get(event.plan, event.plan)
            if not event.question:
                return update(event.ret_frame, f"The model asked for information (<ret>) "
                                               f"{at(event.ret_frame)}; nothing was heard")
            return update(event.ret_frame,
                          f"The model asked for information (<ret>) {at(event.ret_frame)}; "
                          f"asking the LLM, from {how}: “{event.question}”")
        if isinstance(event, oe.NoSpan):
            entry = self._retrievals.get(event.ret_frame)
            base = entry.text if entry is not None else "The model asked for information"
            out = update(event.ret_frame, f"{base} — nothing injected: {event.reason}")
            if event.turn_id in self._thinking:
                out.append(self._end_turn(event.turn_id, f"Nothing to inject: {event.reason}",
                                          now, "info"))
            return out
        if isinstance(event, oe.RetrievalLate):
            return [self._end_turn(event.turn_id, f"The answer to “{event.question}” came "
                                   f"{event.seconds:.1f} s after <ret>, past the model's "
                                   "deadline: dropped", now, "warning")]
        if isinstance(event, ev.SpanLate):
            self._spans.pop(event.span_id, None)
            return [self._notice(f"A span from {self._name_source(event.source)} reached the "
                                 f"model {event.seconds:.1f} s after <ret>, past its deadline: "
                                 "dropped", now, "warning")]
        if isinstance(event, oe.RetrievalIgnored):
            return [self._notice(f"The model asked again {at(event.ret_frame)} while a "
                                 "retrieval was pending: ignored", now, "info")]
        if isinstance(event, ev.BlockSlot) and event.over_budget:
            return [self._notice(f"A {event.positions}-token span block and its frame took "
                                 f"{event.total_ms:.0f} ms, over the 80 ms frame", now,
                                 "warning")]
        return []

    # ---- the user's and the model's words ---------------------------------------------------

    def notice(self, message: str, severity: str = "info") -> TranscriptEntry:
        return self._notice(message, self._clock(), severity)

    def typed(self, text: str) -> list[TranscriptEntry]:
        closed = self._close_assistant()
        return [*closed, self._new("user", text, self._clock(), detail="typed")]

    def _close_assistant(self) -> list[TranscriptEntry]:
        """The user's turn or a landed span ends the model's utterance in the transcript,
        so what the model says next reads below it, in order."""
        if self._assistant is None or self._assistant.final:
            return []
        self._assistant = replace(self._assistant, final=True)
        return [self._assistant]

    def _notice(self, message: str, now: float, severity: str) -> TranscriptEntry:
        return self._new("notice", message, now, detail=severity)

    def _assistant_piece(self, piece: ev.TextPiece, now: float) -> list[TranscriptEntry]:
        current = self._assistant
        if (current is None or current.final
                or piece.frame_index - self._assistant_last_frame > ASSISTANT_PAUSE_FRAMES):
            closed = [] if current is None or current.final else [replace(current, final=True)]
            self._assistant = self._new("assistant", piece.text.lstrip(), now,
                                        conversation_s=piece.frame_index * FRAME_S,
                                        final=False)
            self._assistant_last_frame = piece.frame_index
            return [*closed, self._assistant]
        self._assistant = replace(current, text=current.text + piece.text)
        self._assistant_last_frame = piece.frame_index
        return [self._assistant]


def _tenths(context: SpanContext) -> int:
    """Which tenth of the span is still inside the window (10: all, 0: none): a landed
    span's entry is redrawn when this changes, not on every frame."""
    if context.in_window <= 0:
        return 0
    return max(1, math.ceil(10 * context.in_window / context.positions))
