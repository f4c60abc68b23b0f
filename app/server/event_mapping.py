"""One conversation's engine, ASR and LLM events as the wire's events (app/wire/events.py).

The reference's reading: the model's <ret> is `ret`, the question the LLM was asked is
`question`, an answer that came too late is `late` (dropped by the orchestrator or by the
engine), a <ret> without an answer is `no_span` (at once where the server has no LLM), a span
block's frame is `slot`. A landed span is one `span` event carrying its positions ("frames",
as the reference counts them) and the wall time of its forwards.

Each event's lines are one entry of `WIRE_LINES`, as each event's JSONL line is one entry of
app/conversation/run_records.py's tables: the two formats name an event alike and share the
serialiser, and keep their own fields (the wire is the reference's protocol, which its page
and moshi's client read; the JSONL is what users' runs and the evaluations hold:
docs/events.md). tests/test_event_lines.py holds every event to a line in both, or a reason.
Audio, frame statistics, readiness and the end are the connection's business, not this.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from app.asr.events import AsrError, AsrFinal, AsrPartial, AsrWord
from app.conversation.landing_spans import LandingSpans
from app.engine import events as ev
from app.frames import FRAME_RATE
from app.orchestrator import events as oe
from app.wire import events as wire

NO_LLM_REASON = "this server has no LLM to ask: the client answers <ret> itself, if it can"


class WireMapper:
    def __init__(self, llm_on_server: bool = True) -> None:
        """`llm_on_server`: False where no LLM side runs here; then every <ret> is answered
        `no_span` at once (the reference's page waits for an answer to each `ret`), and a
        client with an LLM of its own (the desktop app) sends its span all the same."""
        self.llm_on_server = llm_on_server
        self._spans = LandingSpans()
        self._questions: dict[int, str] = {}  # turn id -> its question
        self._span_questions: dict[int, str] = {}  # span id -> the question it answers

    def map(self, event: object) -> list[wire.ServerEvent]:
        line = WIRE_LINES.get(type(event))
        return [] if line is None else line(self, event)

    # ---- the engine's --------------------------------------------------------------------

    def _ret(self, event: ev.RetToken) -> list[wire.ServerEvent]:
        if not self.llm_on_server:
            return [wire.Ret(event.frame_index), wire.NoSpan("", NO_LLM_REASON)]
        return [wire.Ret(event.frame_index)]

    def _accepted(self, event: ev.SpanAccepted) -> list[wire.ServerEvent]:
        # Its question, if the orchestrator's SpanQueued came first, stays until it lands.
        self._spans.accepted(event)
        limit = event.cuts[-1].bound if event.cuts else ""
        return [wire.SpanAccepted(event.span_id, event.source, event.tokens,
                                  event.truncated, event.original_content_tokens,
                                  event.kept_content_tokens, limit, event.read_chars)]

    def _chunk(self, event: ev.SpanChunkInjected) -> list[wire.ServerEvent]:
        self._spans.chunk(event)
        return []

    def _landed(self, event: ev.SpanInjected) -> list[wire.ServerEvent]:
        span = self._spans.landed(event.span_id)
        text, prefill_ms = ("", 0.0) if span is None else (span.accepted.text, span.prefill_ms)
        question = self._span_questions.pop(event.span_id, "")
        return [wire.Span(text, question, event.source, event.positions,
                          round(event.positions / FRAME_RATE, 2), round(prefill_ms, 1),
                          event.span_id, event.chunks, event.last_frame, event.origin_frame)]

    def _rejected(self, event: ev.SpanRejected) -> list[wire.ServerEvent]:
        self._spans.dropped(event.span_id)
        self._span_questions.pop(event.span_id, None)
        return [wire.SpanRejected(event.span_id, event.source, event.reason)]

    def _late(self, event: ev.SpanLate) -> list[wire.ServerEvent]:
        question = self._span_questions.pop(event.span_id, "")
        return [wire.Late(question, event.seconds, event.source, event.span_id, "engine")]

    # ---- the LLM side's ------------------------------------------------------------------

    def _turn(self, event: oe.TurnStarted) -> list[wire.ServerEvent]:
        self._questions[event.turn_id] = event.question
        if event.trigger == "ret":  # its question went out as RetrievalQuestion
            return []
        return [wire.Question(event.question, 0.0)]

    def _question(self, event: oe.RetrievalQuestion) -> list[wire.ServerEvent]:
        self._questions[event.turn_id] = event.question
        if not event.question:
            return []  # nothing was heard: a no_span follows
        return [wire.Question(event.question, round(event.waited_ms, 1))]

    def _queued(self, event: oe.SpanQueued) -> list[wire.ServerEvent]:
        # The question its `span` line carries; the engine may have taken the span already.
        self._span_questions[event.span_id] = self._questions.get(event.turn_id, "")
        return []


def _user_text(event: AsrPartial | AsrFinal, final: bool) -> list[wire.ServerEvent]:
    return [wire.UserText(round(event.start_s * FRAME_RATE), final, round(event.end_s, 2),
                          event.text)]


# Each event's wire lines: the event's type -> its handler (the mapper, the event). What
# is not here goes out as no line (`NOT_ON_THE_WIRE` says why), or is the connection's own.
WIRE_LINES: dict[type, Callable[[WireMapper, Any], list[wire.ServerEvent]]] = {
    ev.TextPiece: lambda m, e: [wire.Text(e.text)],
    ev.RetToken: WireMapper._ret,
    ev.SpanAccepted: WireMapper._accepted,
    ev.SpanChunkInjected: WireMapper._chunk,
    ev.SpanInjected: WireMapper._landed,
    ev.SpanRejected: WireMapper._rejected,
    ev.SpanLate: WireMapper._late,
    ev.BlockSlot: lambda m, e: [wire.Slot(round(e.prefill_ms, 1), round(e.step_ms, 1),
                                          round(e.total_ms, 1), e.over_budget, e.span_id)],
    ev.EngineError: lambda m, e: [wire.Error("engine", e.message)],
    AsrPartial: lambda m, e: _user_text(e, final=False),
    AsrFinal: lambda m, e: _user_text(e, final=True),
    AsrError: lambda m, e: [wire.Error("asr", e.message)],
    oe.TurnStarted: WireMapper._turn,
    oe.RetrievalQuestion: WireMapper._question,
    oe.SpanQueued: WireMapper._queued,
    oe.NoSpan: lambda m, e: [wire.NoSpan(e.question, e.reason)],
    oe.RetrievalLate: lambda m, e: [wire.Late(e.question, e.seconds, e.source, None,
                                              "orchestrator")],
    oe.TurnFailed: lambda m, e: [wire.Error("retrieval", f"LLM {e.kind}: {e.message}")],
}

# The conversation's events that are no line of the mapper's, and why.
NOT_ON_THE_WIRE: dict[type, str] = {
    ev.EngineReady: "the connection's `ready` (with the conversation's number)",
    ev.AudioOut: "the connection's binary audio",
    ev.FrameStats: "the server's metrics",
    ev.EngineStopped: "the connection's goodbye",
    ev.FirstAudioAfterSpan: "the orchestrator's latency clock",
    AsrWord: "a partial's words: the partial says them",
    # The LLM side's own life: not in the reference's protocol (a client with an LLM of its
    # own, the desktop app, sees these from its own orchestrator).
    oe.LlmStatus: "the LLM side's own state",
    oe.RetrievalIgnored: "the LLM side's own bookkeeping",
    oe.ToolCalled: "the LLM side's own tools",
    oe.ToolWaiting: "the LLM side's own tools",
    oe.AnswerNotInjected: "the LLM side's own bookkeeping",
    oe.TurnCancelled: "the LLM side's own bookkeeping",
    oe.TurnLatency: "the LLM side's own clock",
}
