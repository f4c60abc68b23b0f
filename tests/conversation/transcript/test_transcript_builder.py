"""The transcript shows the model's own retrieval: its <ret>, the question asked, the span with
its delay from <ret>, and a late answer or no span; a span block over the frame budget."""

from __future__ import annotations

from app.asr.events import AsrFinal
from app.conversation.transcript.builder import TranscriptBuilder, llm_label
from app.engine import events as ev
from app.orchestrator import events as oe


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
    # The span is shown, with why it never reached the model (issue 19, item 1).
    assert dropped[0].kind == "span" and dropped[0].final and dropped[0].text == "text"
    assert dropped[0].detail == ("not injected: it reached the model 2.6 s after <ret>, past "
                                 "its deadline")
    over = builder.entries_for(ev.BlockSlot(5, 70, 400, 60.0, 35.0, 95.0, True))
    assert "95 ms" in over[0].text and over[0].detail == "warning"
    assert builder.entries_for(ev.BlockSlot(6, 71, 20, 10.0, 30.0, 40.0, False)) == []


def test_two_builders_never_share_an_identity():
    """Each session numbers its entries from 1: the origin tells them apart (issue 10, 1)."""
    first, second = TranscriptBuilder(clock=lambda: 1.0), TranscriptBuilder(clock=lambda: 2.0)
    a = first.typed("hello")[0]
    b = second.typed("hello again")[0]
    assert a.entry_id == b.entry_id == 1
    assert a.key != b.key and a.origin and b.origin


def test_a_truncated_span_says_how_much_was_kept():
    builder = TranscriptBuilder(clock=lambda: 100.0)
    accepted = builder.entries_for(ev.SpanAccepted(3, "llm", "long text", 130, True, 15392, 120))
    cut = "the span's content cut: 15,392 → 120 tokens (the speech model's span limit"
    assert accepted[0].detail.startswith("being read by the speech model; " + cut)
    builder.entries_for(ev.SpanChunkInjected(3, "llm", 10, 64, 0, 1.0))
    builder.entries_for(ev.SpanChunkInjected(3, "llm", 11, 66, 1, 1.0))
    landed = builder.entries_for(ev.SpanInjected(3, "llm", 10, 11, 130, 2))[-1]
    assert landed.final and cut in landed.detail
    assert landed.detail.startswith("130 positions in 2 chunks")


def test_a_span_names_the_llm_that_wrote_it():
    builder = TranscriptBuilder(clock=lambda: 1.0, llm=llm_label("ollama", "qwen3:4b"))
    span = builder.entries_for(ev.SpanAccepted(1, "llm+web_search", "x", 3, False, 1, 1))[0]
    assert span.source == "qwen3:4b on Ollama via web_search"
    builder.set_llm(llm_label("openai", "gpt-oss"))
    span = builder.entries_for(ev.SpanAccepted(2, "llm", "y", 3, False, 1, 1))[0]
    assert span.source == "gpt-oss on an OpenAI-compatible server"
    typed = builder.entries_for(ev.SpanAccepted(3, "typed", "z", 3, False, 1, 1))[0]
    assert typed.source == "typed"


def test_an_llm_request_is_one_entry_from_asking_to_its_span():
    builder = TranscriptBuilder(clock=lambda: 5.0)
    asking = builder.entries_for(oe.TurnStarted(1, "weather in Lyon?", "typed"))
    assert [e.kind for e in asking] == ["thinking"] and not asking[0].final
    tool, still = builder.entries_for(oe.ToolCalled(1, "web_search", {"query": "Lyon"}, True,
                                                    None, "ddgs", 900, False))
    assert tool.key == asking[0].key and tool.kind == "tool" and tool.final
    assert still.kind == "thinking" and still.key != tool.key  # asking goes on below the call
    queued = builder.entries_for(oe.SpanQueued(1, 7, "Sunny, 14 °C.", "llm+web_search"))
    assert queued[0].key == still.key and queued[0].kind == "span" and not queued[0].final
    builder.entries_for(ev.SpanAccepted(7, "llm+web_search", "Sunny, 14 °C.", 9, False, 5, 5))
    landed = builder.entries_for(ev.SpanInjected(7, "llm+web_search", 20, 20, 9, 1))
    assert landed[-1].key == still.key and landed[-1].final and landed[-1].landed_frame == 20


def test_a_request_that_ends_without_a_span_says_why_in_its_own_entry():
    builder = TranscriptBuilder(clock=lambda: 5.0)
    for turn, end, words in (
            (1, oe.TurnFailed(1, "timeout", "no answer in 30 s"), "could not answer"),
            (2, oe.TurnCancelled(2, "cancelled by the user"), "cancelled by the user"),
            (3, oe.TurnLatency(3, None, None, None, None, None, None), "nothing to add")):
        asking = builder.entries_for(oe.TurnStarted(turn, "q", "typed"))[0]
        ended = builder.entries_for(end)
        assert len(ended) == 1 and ended[0].key == asking.key
        assert ended[0].kind == "notice" and ended[0].final and words in ended[0].text


def test_the_engine_taking_a_span_before_its_queued_event_still_uses_the_request_entry():
    builder = TranscriptBuilder(clock=lambda: 5.0)
    asking = builder.entries_for(oe.TurnStarted(1, "q", "typed"))[0]
    early = builder.entries_for(ev.SpanAccepted(4, "llm", "answer", 3, False, 1, 1))
    assert early[0].key == asking.key and early[0].kind == "span"
    assert builder.entries_for(oe.SpanQueued(1, 4, "answer", "llm")) == []


def test_a_landed_span_says_how_much_of_the_window_it_uses_until_it_slides_out():
    builder = TranscriptBuilder(clock=lambda: 5.0)

    def frame(index: int, frames: int, spans: int) -> list:
        usage = ev.ContextUsage(100, min(100, frames + spans), frames, spans, 0,
                                frames + spans > 100)
        return builder.entries_for(ev.FrameStats(index, 10.0, 0.0, usage))

    frame(0, 50, 0)
    builder.entries_for(ev.SpanAccepted(1, "typed", "notes", 20, False, 18, 18))
    builder.entries_for(ev.SpanChunkInjected(1, "typed", 51, 20, 0, 2.0))
    landed = builder.entries_for(ev.SpanInjected(1, "typed", 51, 51, 20, 1))[-1]
    assert landed.context is not None
    assert (landed.context.positions, landed.context.in_window) == (20, 20)
    assert landed.context.share == 0.2
    updates = []
    for index in range(51, 200):
        updates += [e for e in frame(index, index + 1, 20) if e.key == landed.key]
    inside = [e.context.in_window for e in updates]
    assert inside == sorted(inside, reverse=True) and inside[-1] == 0
    assert 3 <= len(updates) <= 11  # redrawn by tenths, not on every frame
    # 50 frame positions, then the span's 20: it starts sliding out once 30 more frames
    # pushed the window's start past position 50, and is gone 20 frames later.
    assert frame(250, 251, 20) == []


def test_a_span_that_lands_after_the_model_spoke_on_reads_below_those_words():
    builder = TranscriptBuilder(clock=lambda: 5.0)
    asking = builder.entries_for(oe.TurnStarted(1, "q", "typed"))[0]
    words = builder.entries_for(ev.TextPiece(3, " Well", 10))[0]
    pointer = builder.entries_for(oe.SpanQueued(1, 2, "Canberra.", "llm"))
    assert pointer[0].key == asking.key and pointer[0].kind == "notice"
    span = builder.entries_for(ev.SpanAccepted(2, "llm", "Canberra.", 3, False, 1, 1))[0]
    assert span.kind == "span" and span.entry_id > words.entry_id and span.text == "Canberra."


def test_a_turn_the_recognizer_partly_missed_says_words_may_be_missing():
    builder = TranscriptBuilder(clock=lambda: 100.0)
    whole = builder.entries_for(AsrFinal("what time is it", 1.0, 2.0, "vad", 2.6))
    assert [e.kind for e in whole] == ["user"]
    cut = builder.entries_for(AsrFinal("the capital of", 4.0, 5.0, "vad", 5.6, missed_frames=12))
    assert [e.kind for e in cut] == ["user", "notice"]
    assert cut[1].detail == "warning"
    assert "missed 1.0 s" in cut[1].text and "words may be missing" in cut[1].text
