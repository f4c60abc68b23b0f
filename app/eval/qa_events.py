"""An item's run, read from its JSONL transcript (app/conversation/headless.py) into what the scorer
needs, in the reference's terms: the model's text stream and one event per trigger that
started a retrieval (`t`: its time; `inject`: the span that landed for it, `t_inj`: when).
The transcript is read as typed records (app/conversation/run_records.py).

The trigger is the model's <ret> ("question" records, at the <ret> frame) or, for models
that never ask, the user's end of turn ("turn" records, at the frame the turn started).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from app.conversation.run_records import (
    LateRecord,
    NoSpanRecord,
    NoticeRecord,
    QuestionRecord,
    RetRecord,
    RunRecord,
    SpanQueuedRecord,
    SpanRecord,
    TextRecord,
    TurnRecord,
    of_type,
    read_transcript,
)
from app.frames import FRAME_S

__all__ = ["read_transcript", "ret_tokens", "strip_markers", "text_stream", "trigger_events"]

# A retrieval whose answer had not come back when the input ended: it never completed, so
# the reference's runner, which records a retrieval when its answer comes back, has no event
# for it. Kept here for the record; not counted in `ret_rate` (qa_metrics.completed).
IN_FLIGHT = "in flight when the input ended"
IN_FLIGHT_OUTCOMES = (IN_FLIGHT, "no answer")  # the second: events.json of earlier runs

# Control markers the text stream may carry; the judged answer is the words alone.
_MARKERS = re.compile(r"</?(ret|span)>|\[ret\]|<0x[0-9A-Fa-f]+>")


def strip_markers(text: str) -> str:
    """Words with <ret>/<span> markers removed, spaces normalised."""
    return " ".join(_MARKERS.sub(" ", text).split())


def text_stream(records: Sequence[RunRecord]) -> str:
    """The model's words with <ret>/<span> markers removed, spaces normalised."""
    return strip_markers("".join(r.text for r in of_type(records, TextRecord)))


def trigger_events(records: Sequence[RunRecord]) -> list[dict]:
    """One event per retrieval started: {q, t, inject, src, t_inj, outcome}."""
    landed = {r.span_id: r for r in of_type(records, SpanRecord)}
    span_of_turn = {r.turn_id: r.span_id for r in of_type(records, SpanQueuedRecord)}
    lates = of_type(records, LateRecord)
    late_turns = {r.turn_id for r in lates if r.turn_id is not None}
    late_spans = {r.span_id for r in lates if r.span_id is not None}
    no_span = {r.turn_id: r.reason for r in of_type(records, NoSpanRecord)}
    failed = {r.turn_id for r in of_type(records, NoticeRecord)
              if r.turn_id is not None and r.message.startswith("LLM ")}
    questions = of_type(records, QuestionRecord)
    if questions:
        starts = [(r.turn_id, r.ret_frame, r.question) for r in questions]
    else:
        starts = [(r.turn_id, r.frame, r.question) for r in of_type(records, TurnRecord)]
    events = []
    for turn_id, frame, question in starts:
        event = {"turn_id": turn_id, "q": question, "t": round(frame * FRAME_S, 3),
                 "inject": None, "src": None, "t_inj": None, "outcome": IN_FLIGHT}
        span_id = span_of_turn.get(turn_id)
        span = landed.get(span_id) if span_id is not None else None
        if span is not None and span.landed_before is not None:
            event.update(inject=span.text, src=span.source, outcome="span",
                         t_inj=round(span.landed_before * FRAME_S, 3))
        elif turn_id in late_turns or span_id in late_spans:
            event["outcome"] = "late"
        elif turn_id in no_span:
            event["outcome"] = f"no span: {no_span[turn_id]}"
        elif turn_id in failed:
            event["outcome"] = "LLM failed"
        elif span_id is not None:
            event["outcome"] = "queued, not landed before the input ended"
        events.append(event)
    return events


def ret_tokens(records: Sequence[RunRecord]) -> list[float]:
    """Times of every <ret> the model emitted (asked on or not)."""
    return [r.time for r in of_type(records, RetRecord)]
