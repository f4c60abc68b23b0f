"""The transcript shows the model's own retrieval: its <ret>, the question asked, the span with
its delay from <ret>, and a late answer or no span; a span block over the frame budget."""

from __future__ import annotations

from app.engine import events as ev
from app.orchestrator import events as oe
from app.transcript_builder import TranscriptBuilder


def test_a_retrieval_is_one_entry_that_grows_and_its_span_says_when_it_landed():
    builder = TranscriptBuilder(clock=lambda: 100.0)
    asked = builder.entries_for(ev.RetToken(53))
    assert len(asked) == 1 and asked[0].kind == "notice"
    assert "<ret>" in asked[0].text and "4.2 s" in asked[0].text
    question = builder.entries_for(oe.RetrievalQuestion(1, 53, "what is the capital", "cache",
                                                        0.0))
    assert question[0].entry_id == asked[0].entry_id  # the same entry, updated in place
    assert "what is the capital" in question[0].text and "your last words" in question[0].text
    builder.entries_for(ev.SpanAccepted(7, "llm", "Canberra.", 5, False, 3, 3))
    landed = builder.entries_for(ev.SpanInjected(7, "llm", 66, 66, 5, 1, origin_frame=53))
    span = [e for e in landed if e.kind == "span"][0]
    assert span.landed_frame == 66 and "landed 1.04 s after <ret>" in span.detail


def test_no_span_late_and_an_overrun_are_shown():
    builder = TranscriptBuilder(clock=lambda: 100.0)
    builder.entries_for(ev.RetToken(10))
    none = builder.entries_for(oe.NoSpan(1, 10, "who am i", "the LLM found no information"))
    assert "nothing injected: the LLM found no information" in none[0].text
    late = builder.entries_for(oe.RetrievalLate(2, 30, "what time is it", 3.04, "llm"))
    assert late[0].detail == "warning" and "3.0 s after <ret>" in late[0].text
    dropped = builder.entries_for(ev.SpanLate(4, "llm", "text", 30, 63, 2.64))
    assert dropped[0].detail == "warning" and "past its deadline" in dropped[0].text
    over = builder.entries_for(ev.BlockSlot(5, 70, 400, 60.0, 35.0, 95.0, True))
    assert "95 ms" in over[0].text and over[0].detail == "warning"
    assert builder.entries_for(ev.BlockSlot(6, 71, 20, 10.0, 30.0, 40.0, False)) == []
