"""One conversation's engine, ASR and LLM events as the wire's events (app/wire/events.py).

The same reading as the headless transcript (conversation/headless.py `_record`): the model's <ret>
is `ret`, the question the LLM was asked is `question`, an answer that came too late is
`late` (dropped by the orchestrator or by the engine), a <ret> without an answer is
`no_span` (at once where the server has no LLM), a span block's frame is `slot`. A landed
span is one `span` event carrying its positions ("frames", as the reference counts them)
and the wall time of its forwards.
Audio, frame statistics, readiness and the end are the connection's business, not this.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.asr.events import AsrError, AsrFinal, AsrPartial
from app.engine import events as ev
from app.frames import FRAME_RATE
from app.orchestrator import events as oe
from app.wire import events as wire


@dataclass
class _SpanSoFar:
    text: str
    source: str
    prefill_ms: float = 0.0
    question: str = ""


NO_LLM_REASON = "this server has no LLM to ask: the client answers <ret> itself, if it can"


class WireMapper:
    def __init__(self, llm_on_server: bool = True) -> None:
        """`llm_on_server`: False where no LLM side runs here; then every <ret> is answered
        `no_span` at once (the reference's page waits for an answer to each `ret`), and a
        client with an LLM of its own (the desktop app) sends its span all the same."""
        self.llm_on_server = llm_on_server
        self._spans: dict[int, _SpanSoFar] = {}
        self._questions: dict[int, str] = {}  # turn id -> its question
        self._span_questions: dict[int, str] = {}  # span id -> the question it answers

    def map(self, event: object) -> list[wire.ServerEvent]:
        if isinstance(event, ev.TextPiece):
            return [wire.Text(event.text)]
        if isinstance(event, (ev.SpanAccepted, ev.SpanChunkInjected, ev.SpanInjected,
                              ev.SpanRejected, ev.SpanLate)):
            return self._span_event(event)
        if isinstance(event, ev.RetToken):
            if not self.llm_on_server:
                return [wire.Ret(event.frame_index), wire.NoSpan("", NO_LLM_REASON)]
            return [wire.Ret(event.frame_index)]
        if isinstance(event, ev.BlockSlot):
            return [wire.Slot(round(event.prefill_ms, 1), round(event.step_ms, 1),
                              round(event.total_ms, 1), event.over_budget, event.span_id)]
        if isinstance(event, ev.EngineError):
            return [wire.Error("engine", event.message)]
        if isinstance(event, (AsrPartial, AsrFinal)):
            return [wire.UserText(round(event.start_s * FRAME_RATE),
                                  isinstance(event, AsrFinal), round(event.end_s, 2),
                                  event.text)]
        if isinstance(event, AsrError):
            return [wire.Error("asr", event.message)]
        return self._llm_event(event)

    def _span_event(self, event: object) -> list[wire.ServerEvent]:
        if isinstance(event, ev.SpanAccepted):
            question = self._span_questions.pop(event.span_id, "")
            self._spans[event.span_id] = _SpanSoFar(event.text, event.source, question=question)
            limit = event.cuts[-1].bound if event.cuts else ""
            return [wire.SpanAccepted(event.span_id, event.source, event.tokens,
                                      event.truncated, event.original_content_tokens,
                                      event.kept_content_tokens, limit, event.read_chars)]
        if isinstance(event, ev.SpanChunkInjected):
            span = self._spans.get(event.span_id)
            if span is not None:
                span.prefill_ms += event.prefill_ms
            return []
        if isinstance(event, ev.SpanInjected):
            span = self._spans.pop(event.span_id, None) or _SpanSoFar("", event.source)
            return [wire.Span(span.text, span.question, event.source, event.positions,
                              round(event.positions / FRAME_RATE, 2), round(span.prefill_ms, 1),
                              event.span_id, event.chunks, event.last_frame,
                              event.origin_frame)]
        if isinstance(event, ev.SpanRejected):
            self._spans.pop(event.span_id, None)
            return [wire.SpanRejected(event.span_id, event.source, event.reason)]
        assert isinstance(event, ev.SpanLate)
        question = self._span_questions.pop(event.span_id, "")
        return [wire.Late(question, event.seconds, event.source, event.span_id, "engine")]

    def _llm_event(self, event: object) -> list[wire.ServerEvent]:
        if isinstance(event, oe.TurnStarted):
            self._questions[event.turn_id] = event.question
            if event.trigger == "ret":  # its question went out as RetrievalQuestion
                return []
            return [wire.Question(event.question, 0.0)]
        if isinstance(event, oe.RetrievalQuestion):
            self._questions[event.turn_id] = event.question
            if not event.question:
                return []  # nothing was heard: a no_span follows
            return [wire.Question(event.question, round(event.waited_ms, 1))]
        if isinstance(event, oe.SpanQueued):  # may come after the engine took the span
            question = self._questions.get(event.turn_id, "")
            span = self._spans.get(event.span_id)
            if span is not None:
                span.question = question
            else:
                self._span_questions[event.span_id] = question
            return []
        if isinstance(event, oe.NoSpan):
            return [wire.NoSpan(event.question, event.reason)]
        if isinstance(event, oe.RetrievalLate):
            return [wire.Late(event.question, event.seconds, event.source, None,
                              "orchestrator")]
        if isinstance(event, oe.TurnFailed):
            return [wire.Error("retrieval", f"LLM {event.kind}: {event.message}")]
        return []
