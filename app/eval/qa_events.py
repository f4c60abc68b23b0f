"""An item's run, read from its JSONL transcript (app/conversation/headless.py) into what the scorer
needs, in the reference's terms: the model's text stream and one event per trigger that
started a retrieval (`t`: its time; `inject`: the span that landed for it, `t_inj`: when).

The trigger is the model's <ret> ("question" records, at the <ret> frame) or, for models
that never ask, the user's end of turn ("turn" records, at the frame the turn started).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from app.frames import FRAME_S

# A retrieval whose answer had not come back when the input ended: it never completed, so
# the reference's runner, which records a retrieval when its answer comes back, has no event
# for it. Kept here for the record; not counted in `ret_rate` (qa_metrics.completed).
IN_FLIGHT = "in flight when the input ended"
IN_FLIGHT_OUTCOMES = (IN_FLIGHT, "no answer")  # the second: events.json of earlier runs

# Control markers the text stream may carry; the judged answer is the words alone.
_MARKERS = re.compile(r"</?(ret|span)>|\[ret\]|<0x[0-9A-Fa-f]+>")


def read_transcript(path: Path) -> list[dict]:
    records = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if line.strip():
            records.append(json.loads(line))
    return records


def text_stream(records: list[dict]) -> str:
    """The model's words with <ret>/<span> markers removed, spaces normalised."""
    joined = "".join(r["text"] for r in records if r.get("type") == "text")
    return " ".join(_MARKERS.sub(" ", joined).split())


def trigger_events(records: list[dict]) -> list[dict]:
    """One event per retrieval started: {q, t, inject, src, t_inj, outcome}."""
    landed: dict[int, dict] = {r["span_id"]: r for r in records if r.get("type") == "span"}
    span_of_turn = {r["turn_id"]: r["span_id"] for r in records
                    if r.get("type") == "span_queued"}
    late_turns = {r["turn_id"] for r in records if r.get("type") == "late" and "turn_id" in r}
    late_spans = {r["span_id"] for r in records if r.get("type") == "late" and "span_id" in r}
    no_span = {r["turn_id"]: r["reason"] for r in records if r.get("type") == "no_span"}
    failed = {r["turn_id"] for r in records if r.get("type") == "notice" and "turn_id" in r
              and str(r.get("message", "")).startswith("LLM ")}
    questions = [r for r in records if r.get("type") == "question"]
    if questions:
        starts = [(r["turn_id"], r["ret_frame"], r["question"]) for r in questions]
    else:
        starts = [(r["turn_id"], r["frame"], r["question"]) for r in records
                  if r.get("type") == "turn"]
    events = []
    for turn_id, frame, question in starts:
        event = {"turn_id": turn_id, "q": question, "t": round(frame * FRAME_S, 3),
                 "inject": None, "src": None, "t_inj": None, "outcome": IN_FLIGHT}
        span_id = span_of_turn.get(turn_id)
        span = landed.get(span_id) if span_id is not None else None
        if span is not None and span.get("chunks"):
            event.update(inject=span["text"], src=span["source"], outcome="span",
                         t_inj=round(span["chunks"][-1]["before_frame"] * FRAME_S, 3))
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


def ret_tokens(records: list[dict]) -> list[float]:
    """Times of every <ret> the model emitted (asked on or not)."""
    return [r["time"] for r in records if r.get("type") == "ret"]
