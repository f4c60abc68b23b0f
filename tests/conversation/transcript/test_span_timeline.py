"""An LLM answer's entry says what happened to it when it happened (issue 19, items 1 and 7):
answered and queued, being read, landed where the model read it, or not injected and why;
never "it reached the voice" before it did, and never no entry at all."""

from __future__ import annotations

from app.conversation.transcript.builder import TranscriptBuilder
from app.conversation.transcript.entries import closed
from app.engine import events as ev
from app.orchestrator import events as oe


def builder() -> TranscriptBuilder:
    return TranscriptBuilder(clock=lambda: 10.0, llm="qwen3:4b on Ollama")


def test_an_answer_queued_behind_words_says_queued_then_read_then_landed_below_them():
    b = builder()
    b.entries_for(oe.TurnStarted(1, "what is the capital", "typed"))
    words = b.entries_for(ev.TextPiece(3, " Let me think", 10))[-1]
    queued = b.entries_for(oe.SpanQueued(1, 5, "Canberra.", "llm"))
    pointer, span = queued
    assert pointer.kind == "notice" and "its span is below" in pointer.text
    assert "reached the voice" not in pointer.text  # nothing has reached it yet
    assert span.kind == "span" and span.text == "Canberra." and not span.final
    assert span.detail == "queued: waiting for the speech model"
    assert span.entry_id > words.entry_id

    reading = b.entries_for(ev.SpanAccepted(5, "llm", "Canberra.", 6, False, 4, 4))[-1]
    assert reading.key == span.key and reading.detail == "being read by the speech model"
    b.entries_for(ev.SpanChunkInjected(5, "llm", 8, 6, 0, 1.0))
    landed = b.entries_for(ev.SpanInjected(5, "llm", 8, 8, 6, 1))[-1]
    assert landed.key == span.key and landed.final and landed.landed_frame == 8
    assert landed.detail == "6 positions in 1 chunk"


def test_a_span_the_model_spoke_over_while_it_waited_lands_below_those_words():
    b = builder()
    b.entries_for(oe.TurnStarted(1, "q", "typed"))
    span = b.entries_for(oe.SpanQueued(1, 5, "Canberra.", "llm"))[-1]
    assert span.kind == "span"  # the request's own entry, at once
    b.entries_for(ev.SpanAccepted(5, "llm", "Canberra.", 6, False, 4, 4))
    words = b.entries_for(ev.TextPiece(3, " Well", 10))[-1]
    out = b.entries_for(ev.SpanInjected(5, "llm", 9, 9, 6, 1))
    where_queued = next(e for e in out if e.key == span.key)
    landed = out[-1]
    assert where_queued.kind == "notice" and "reached the speech model at +0:00.7" in (
        where_queued.text) and "below" in where_queued.text
    assert landed.kind == "span" and landed.final and landed.text == "Canberra."
    assert landed.entry_id > words.entry_id


def test_an_answer_refused_before_its_queued_event_is_its_own_entry_with_why():
    """A remote engine that is down refuses in `inject`: its SpanRejected can come first."""
    b = builder()
    b.entries_for(oe.TurnStarted(1, "and of France?", "typed"))
    assert b.entries_for(ev.SpanRejected(3, "llm", "the connection to the speech server "
                                                   "is down")) == []
    entry, = b.entries_for(oe.SpanQueued(1, 3, "Paris.", "llm"))
    assert entry.kind == "span" and entry.final and entry.text == "Paris."
    assert entry.detail == "not injected: the connection to the speech server is down"
    assert entry.source == "qwen3:4b on Ollama"


def test_an_answer_the_engine_refused_outright_or_too_late_is_still_shown():
    b = builder()
    b.entries_for(oe.TurnStarted(1, "q", "typed"))
    refused, = b.entries_for(oe.AnswerNotInjected(1, "Paris.", "llm", "the conversation has "
                                                  "ended"))
    assert refused.kind == "span" and refused.final and refused.text == "Paris."
    assert refused.detail == "not injected: the conversation has ended"
    b.entries_for(oe.TurnStarted(2, "what time is it", "ret"))
    late, = b.entries_for(oe.RetrievalLate(2, 30, "what time is it", 3.04, "llm+clock",
                                           "It is noon."))
    assert late.kind == "span" and late.text == "It is noon." and late.final
    assert "not injected: it came 3.0 s after <ret>, past the model's deadline" in late.detail


def test_a_queued_span_closed_with_its_conversation_says_it_was_never_read():
    b = builder()
    span, = b.remember_span(4, "the notes", "dropped file: notes.txt")
    assert span.kind == "span" and not span.final and span.detail.startswith("queued")
    assert closed(span).detail == "not injected: the conversation stopped"
    read = b.entries_for(ev.SpanAccepted(4, "dropped file: notes.txt", "the notes", 5, False,
                                         3, 3))[-1]
    assert closed(read).detail == "only partly read: the conversation stopped"


def test_every_cut_is_said_in_order_with_its_sizes_and_what_the_model_read():
    from app.cuts import Cut  # new with this test: imported here, so the others run without

    b = builder()
    b.entries_for(oe.TurnStarted(1, "tell me everything", "typed"))
    reply = Cut("the LLM's reply", 5_000_000, 1_536, "characters", "the span's bound")
    text = "word " * 307
    b.entries_for(oe.SpanQueued(1, 2, text, "llm", (reply,)))
    tokens = Cut("the span's content", 400, 120, "tokens", "the speech model's span limit")
    b.entries_for(ev.SpanAccepted(2, "llm", text, 128, True, 400, 120, (tokens,), 600))
    landed = b.entries_for(ev.SpanInjected(2, "llm", 3, 3, 128, 1))[-1]
    assert landed.detail == (
        "128 positions in 1 chunk; "
        "the LLM's reply cut: 5,000,000 → 1,536 characters (the span's bound); "
        "the span's content cut: 400 → 120 tokens (the speech model's span limit); "
        f"the model read the first 600 of {len(text):,} characters")
    assert landed.read_chars == 600
