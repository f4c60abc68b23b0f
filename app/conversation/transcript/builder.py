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
from app.conversation.transcript.entries import (
    QUEUED,
    READING,
    EntryKind,
    SpanContext,
    TranscriptEntry,
)
from app.conversation.transcript.export import describe_source, format_conversation_time
from app.cuts import Cut, describe_read
from app.engine import events as ev
from app.frames import FRAME_S
from app.llm_backends import llm_backend_kind
from app.orchestrator import events as oe
from app.orchestrator.span_writer import speakable_span_cut

ASSISTANT_PAUSE_FRAMES = 12  # ~1 s without words closes the model's utterance
# A tool call's result is shown as a span would be read: cut at a sentence end, this long.
TOOL_RESULT_SHOWN = 600


def tool_call_entry(event: oe.ToolCalled) -> tuple[str, str]:
    """A tool call's entry: its text (the server, the tool, the arguments, then the result
    cut as spans are cut) and its detail (how it went, its size, how long it took, and every
    cut with its sizes)."""
    name = event.server_tool or event.tool
    args = ", ".join(f"{k}={v!r}" for k, v in event.arguments.items())
    text = f"{event.server}: {name}({args})" if event.server else f"{name}({args})"
    status = "ok" if event.ok else f"failed: {event.error}"
    parts = [status, f"{event.chars:,} characters"]
    if event.elapsed_ms is not None:
        parts.append(f"in {event.elapsed_ms / 1000.0:.2f} s" if event.elapsed_ms >= 1000
                     else f"in {event.elapsed_ms:.0f} ms")
    parts += [cut.describe() for cut in event.cuts]  # each bound that cut the output
    if event.truncated and not event.cuts:
        parts.append("truncated")
    if event.result:
        shown, cuts = speakable_span_cut(event.result, TOOL_RESULT_SHOWN, f"{name}'s result")
        text += f"\n→ {shown}"
        parts += [f"shown: {cut.describe()}" for cut in cuts]
    return text, "; ".join(parts)


def llm_label(backend: str, model: str = "") -> str:
    """How a span's source names the LLM: "qwen3:4b on Ollama" (backend as in settings)."""
    kind = llm_backend_kind(backend)
    name = kind.prose if kind is not None else backend
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
        self._last_notice_id = 0  # the latest notice: words after it start a new bubble
        self._assistant: TranscriptEntry | None = None
        self._assistant_last_frame = -1
        self._user: TranscriptEntry | None = None
        self._spans: dict[int, TranscriptEntry] = {}  # span id -> its entry, until it lands
        self._span_text: dict[int, tuple[str, str]] = {}
        # What the bounds cut from each span on its way (app/cuts.py), and how many of its
        # characters the model read when it read only the start.
        self._span_cuts: dict[int, tuple[Cut, ...]] = {}
        self._span_read: dict[int, int] = {}
        # LLM spans the engine refused before their SpanQueued came (a remote engine that is
        # down refuses in `inject`): span id -> why, said on the answer's entry.
        self._refused: dict[int, str] = {}
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

    def remember_span(self, span_id: int, text: str, source: str,
                      cuts: tuple[Cut, ...] = ()) -> list[TranscriptEntry]:
        """A span the UI queued itself (typed, dropped, pasted): its entry, at once, with its
        whole text (`cuts`: what was cut before it was queued)."""
        self._span_text[span_id] = (text, source)
        self._add_cuts(span_id, cuts)
        if span_id in self._spans:  # the engine spoke of it first
            return []
        entry = self._new("span", text, self._clock(), source=self._name_source(source),
                          final=False)
        return [self._span_state(span_id, entry, QUEUED)]

    def span_not_injected(self, text: str, source: str, reason: str,
                          cuts: tuple[Cut, ...] = ()) -> TranscriptEntry:
        """A span the engine refused outright: its entry, with its text and why."""
        entry = self._new("span", text, self._clock(), source=self._name_source(source))
        return replace(entry, detail=self._detail(entry, f"not injected: {reason}", cuts))

    def context_lost(self, reason: str) -> list[TranscriptEntry]:
        """The speech model's context is gone (the server's conversation ended with the
        connection): the landed spans it held are marked lost, not left "inside"."""
        out = []
        for entry in self._in_window.values():
            assert entry.context is not None
            out.append(replace(entry, context=replace(entry.context, in_window=0,
                                                      lost=reason)))
        self._in_window.clear()
        self._chunks.clear()
        return out

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
            return self._span_read_so_far(event.span_id)
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
            return self._span_refused(event.span_id, event.source, "", event.reason, now,
                                      f"A span from {self._name_source(event.source)} was not "
                                      f"injected: {event.reason}")
        return self._turn_entries(event, now) or self._retrieval_entries(event, now)

    # ---- an LLM request, from "asking" to what came of it --------------------------------

    def _turn_entries(self, event: object, now: float) -> list[TranscriptEntry]:
        if isinstance(event, oe.TurnStarted):
            entry = self._new("thinking", f"“{event.question}”", now, detail=event.trigger,
                              final=False)
            self._thinking[event.turn_id] = entry
            return [entry]
        if isinstance(event, oe.ToolCalled):
            text, detail = tool_call_entry(event)
            pending = self._thinking.get(event.turn_id)
            tool = self._become(pending, "tool", text, now, source=event.source,
                                detail=detail)
            if pending is None:
                return [tool]
            # The request goes on after its tool: "asking" moves below the call.
            self._thinking[event.turn_id] = self._new("thinking", pending.text, now,
                                                      detail=pending.detail, final=False)
            return [tool, self._thinking[event.turn_id]]
        if isinstance(event, oe.ToolWaiting):
            told = "the voice was told to wait" if event.span_id is not None else \
                "the voice could not be told"
            where = f" on {event.server}" if event.server else ""
            return [self._notice(f"{event.tool}{where} changes things: it waits for your "
                                 f"permission (above the transcript; {told}).", now, "info")]
        if isinstance(event, oe.SpanQueued):
            return self._span_queued(event, now)
        if isinstance(event, oe.AnswerNotInjected):
            return self._answer_dropped(event.turn_id, event.text, event.source, event.cuts,
                                        f"not injected: {event.reason}", now)
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
        """The LLM answered and its span is queued: the answer is a span entry from now on,
        saying where it stands (queued, being read, landed, or not injected and why)."""
        refused = self._refused.pop(event.span_id, None)
        if refused is not None:
            return self._answer_dropped(event.turn_id, event.text, event.source, event.cuts,
                                        f"not injected: {refused}", now)
        pending = self._thinking.pop(event.turn_id, None)
        self._span_text.setdefault(event.span_id, (event.text, event.source))
        self._add_cuts(event.span_id, event.cuts)
        entry = self._spans.get(event.span_id)
        if entry is not None:  # the engine took it first (its SpanAccepted came before)
            out = [self._span_state(event.span_id, entry, self._state(entry))]
            if out[0] == entry:
                out = []
        elif pending is not None and not self._below(pending):
            entry = self._become(pending, "span", event.text, now,
                                 source=self._name_source(event.source), final=False)
            return [self._span_state(event.span_id, entry, QUEUED)]
        else:  # at the end, below what was said since the question
            entry = self._new("span", event.text, now,
                              source=self._name_source(event.source), final=False)
            out = [self._span_state(event.span_id, entry, QUEUED)]
        if pending is None or pending.key == entry.key:
            return out
        return [self._become(pending, "notice", f"The LLM answered {pending.text}: its span "
                             "is below.", now, detail="info"), *out]

    def _answer_dropped(self, turn_id: int, text: str, source: str, cuts: tuple[Cut, ...],
                        why: str, now: float) -> list[TranscriptEntry]:
        """An answer that will never reach the model: still shown, with why."""
        pending = self._thinking.pop(turn_id, None)
        if pending is not None and self._below(pending):
            pending_notice = self._become(pending, "notice", f"The LLM answered "
                                          f"{pending.text}: its answer is below.", now,
                                          detail="info")
            entry = self._new("span", text, now, source=self._name_source(source))
            return [pending_notice, replace(entry, detail=self._detail(entry, why, cuts))]
        entry = self._become(pending, "span", text, now, source=self._name_source(source))
        return [replace(entry, final=True, detail=self._detail(entry, why, cuts))]

    # ---- spans ---------------------------------------------------------------------------

    def _name_source(self, source: str) -> str:
        """`llm+web_search` -> "qwen3:4b on Ollama via web_search" when the LLM is known."""
        if not self._llm or not (source == "llm" or source.startswith("llm+")):
            return source
        tools = source.split("+")[1:]
        return f"{self._llm} via {', '.join(tools)}" if tools else self._llm

    def _add_cuts(self, span_id: int, cuts: tuple[Cut, ...]) -> None:
        if cuts:
            self._span_cuts[span_id] = self._span_cuts.get(span_id, ()) + cuts

    def _detail(self, entry: TranscriptEntry, state: str,
                cuts: tuple[Cut, ...] = ()) -> str:
        """A span's detail line: where it stands, then every cut on its way with its sizes,
        then how much of its text the model read when that is not all of it."""
        parts = [state, *(cut.describe() for cut in cuts)]
        if entry.read_chars is not None and entry.read_chars < len(entry.text):
            parts.append(describe_read(entry.read_chars, len(entry.text)))
        return "; ".join(parts)

    def _span_state(self, span_id: int, entry: TranscriptEntry, state: str
                    ) -> TranscriptEntry:
        """`entry` (still open) as span `span_id`'s, saying `state`; kept until it ends."""
        read = self._span_read.get(span_id)
        if read is not None:
            entry = replace(entry, read_chars=read)
        entry = replace(entry, detail=self._detail(entry, state,
                                                   self._span_cuts.get(span_id, ())))
        self._spans[span_id] = entry
        return entry

    @staticmethod
    def _state(entry: TranscriptEntry) -> str:
        return entry.detail.split("; ", 1)[0] if entry.detail else QUEUED

    def _span_accepted(self, event: ev.SpanAccepted, now: float) -> list[TranscriptEntry]:
        cuts = event.cuts
        if event.truncated and not any(cut.unit == "tokens" for cut in cuts):
            cuts += (Cut("the span's content", event.original_content_tokens,
                         event.kept_content_tokens, "tokens",
                         f"the speech model's span limit: {event.kept_content_tokens:,} "
                         "tokens"),)
        self._add_cuts(event.span_id, cuts)
        if event.read_chars is not None:
            self._span_read[event.span_id] = event.read_chars
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
        return [self._span_state(event.span_id, entry, READING)]

    def _only_pending_llm_request(self, source: str) -> TranscriptEntry | None:
        if not _from_llm(source) or len(self._thinking) != 1:
            return None
        pending = next(iter(self._thinking.values()))
        return None if self._below(pending) else pending

    def _span_injected(self, event: ev.SpanInjected, now: float) -> list[TranscriptEntry]:
        entry = self._spans.pop(event.span_id, None)
        if entry is None:
            return []
        out = self._close_assistant()
        chunks = "1 chunk" if event.chunks == 1 else f"{event.chunks} chunks"
        state = f"{event.positions:,} positions in {chunks}"
        if event.origin_frame is not None:
            after = (event.last_frame - event.origin_frame) * FRAME_S
            state += f"; landed {after:.2f} s after <ret>"
        at = event.last_frame * FRAME_S
        if self._assistant is not None and self._assistant.entry_id > entry.entry_id:
            # The model spoke on while it waited: the span reads where the model read it,
            # below those words; where it was queued says so.
            out.append(replace(entry, kind="notice", final=True, wall_time=now,
                               text=f"The span from {describe_source(entry.source)} queued "
                                    f"here reached the speech model at "
                                    f"{format_conversation_time(at)}: it is below.",
                               detail="info", read_chars=None))
            entry = self._new("span", entry.text, now, source=entry.source,
                              read_chars=entry.read_chars)
        landed = replace(entry, final=True, landed_frame=event.last_frame, conversation_s=at,
                         detail=self._detail(entry, state,
                                             self._span_cuts.pop(event.span_id, ())),
                         wall_time=now, context=self._context_of(event.span_id,
                                                                 event.positions))
        self._span_read.pop(event.span_id, None)
        if landed.context is not None and landed.context.in_window:
            self._in_window[event.span_id] = landed
        return [*out, landed]

    def _span_refused(self, span_id: int, source: str, text: str, reason: str, now: float,
                      notice: str, severity: str = "warning") -> list[TranscriptEntry]:
        """A span the engine will not read: its entry says so (one is made from its text when
        none is on screen yet); a span the transcript knows nothing of is a notice."""
        entry = self._spans.pop(span_id, None)
        if entry is None:
            known, known_source = self._span_text.get(span_id, (text, source))
            if not known and _from_llm(source):  # its SpanQueued is on its way: said there
                self._refused[span_id] = reason
                return []
            if not known:
                return [self._notice(notice, now, severity)]
            entry = self._new("span", known, now, source=self._name_source(known_source))
        self._span_read.pop(span_id, None)
        detail = self._detail(entry, f"not injected: {reason}", self._span_cuts.pop(span_id, ()))
        return [replace(entry, final=True, wall_time=now, detail=detail)]

    # ---- the context window --------------------------------------------------------------

    def _span_read_so_far(self, span_id: int) -> list[TranscriptEntry]:
        """A span read in chunks (over many frames, one position a frame for some models)
        is in the model's context from its first chunk: its entry says how much, so that
        "What the model knows" lists it while the status bar counts its positions."""
        entry = self._spans.get(span_id)
        if entry is None:
            return []
        read = sum(length for _first, length in self._chunks.get(span_id, ()))
        context = self._context_of(span_id, read)
        if context is None or context == entry.context:
            return []
        entry = self._spans[span_id] = replace(entry, context=context)
        return [entry]

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
            late = (f"The answer to “{event.question}” came {event.seconds:.1f} s after "
                    "<ret>, past the model's deadline: dropped")
            if not event.text:
                return [self._end_turn(event.turn_id, late, now, "warning")]
            return self._answer_dropped(
                event.turn_id, event.text, event.source, (),
                f"not injected: it came {event.seconds:.1f} s after <ret>, past the model's "
                "deadline", now)
        if isinstance(event, ev.SpanLate):
            why = (f"it reached the model {event.seconds:.1f} s after <ret>, past its "
                   "deadline")
            return self._span_refused(event.span_id, event.source, event.text, why, now,
                                      f"A span from {self._name_source(event.source)} "
                                      f"reached the model {event.seconds:.1f} s after <ret>, "
                                      "past its deadline: dropped")
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
        entry = self._new("notice", message, now, detail=severity)
        self._last_notice_id = entry.entry_id  # the model's next words go below it
        return entry

    def _assistant_piece(self, piece: ev.TextPiece, now: float) -> list[TranscriptEntry]:
        current = self._assistant
        if (current is None or current.final
                or piece.frame_index - self._assistant_last_frame > ASSISTANT_PAUSE_FRAMES
                or self._last_notice_id > current.entry_id):  # a notice came between
            closed = [] if current is None or current.final else [replace(current, final=True)]
            self._assistant = self._new("assistant", piece.text.lstrip(), now,
                                        conversation_s=piece.frame_index * FRAME_S,
                                        final=False)
            self._assistant_last_frame = piece.frame_index
            return [*closed, self._assistant]
        self._assistant = replace(current, text=current.text + piece.text)
        self._assistant_last_frame = piece.frame_index
        return [self._assistant]


def _from_llm(source: str) -> bool:
    return source == "llm" or source.startswith("llm+")


def _tenths(context: SpanContext) -> int:
    """Which tenth of the span is still inside the window (10: all, 0: none): a landed
    span's entry is redrawn when this changes, not on every frame."""
    if context.in_window <= 0:
        return 0
    return max(1, math.ceil(10 * context.in_window / context.positions))
