"""Model-triggered retrieval (<ret>) through the orchestrator, with the real `ollama` client
against the stand-in server. Conversation time is driven by the engine's frames (AudioOut
events, fed here by hand), so every deadline below is exact, whatever the machine."""

from __future__ import annotations

import contextlib
import queue
import time

import numpy as np
import pytest

from app.asr.events import AsrFinal, AsrPartial, AsrWord
from app.checkpoints.catalog import Retrieval
from app.engine.events import AudioOut, RetToken, SpanInjected, SpanLate
from app.llm.ollama_backend import OllamaBackend, OllamaSettings
from app.llm.ollama_standin import OllamaStandIn, ScriptedReply
from app.orchestrator import events as oe
from app.orchestrator.orchestrator import Orchestrator, OrchestratorOptions
from app.orchestrator.retrieval import UtteranceTracker, is_no_information
from app.tools.base import ToolRegistry
from app.tools.calculator import CalculatorTool

POLICY = Retrieval(trigger="ret_token", ret_id=4, deadline_s=2.5, lowercase_question=True)
SILENT = np.zeros(1920, np.float32)


class RecordingSink:
    def __init__(self) -> None:
        self.spans: list[dict] = []

    def inject(self, text: str, source: str, at_frame: int = 0,
               origin_frame: int | None = None, deadline_frame: int | None = None) -> int:
        self.spans.append({"text": text, "source": source, "origin_frame": origin_frame,
                           "deadline_frame": deadline_frame})
        return len(self.spans)


@pytest.fixture()
def standin():
    with OllamaStandIn(models=("standin:latest",)) as server:
        yield server


def make(standin, profile: str = "name: Ada; city: Seoul"):
    backend = OllamaBackend(OllamaSettings(host=standin.url, model="standin:latest",
                                           timeout_s=5.0, connect_timeout_s=1.0))
    sink = RecordingSink()
    orch = Orchestrator(backend, ToolRegistry([CalculatorTool()]), sink,
                        OrchestratorOptions(max_span_chars=300, retrieval=POLICY,
                                            profile=profile))
    orch.start()
    return orch, sink


def frames(orch: Orchestrator, first: int, last: int) -> None:
    for index in range(first, last + 1):
        orch.on_engine_event(AudioOut(index, SILENT))


def collect_until(orch, done, timeout: float = 10.0) -> list:
    events, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(queue.Empty):
            events.append(orch.events.get(timeout=0.05))
        if done(events):
            return events
    raise AssertionError(f"timed out; events so far: {events}")


def of(kind, events):
    return [e for e in events if isinstance(e, kind)]


def final(text: str, start: float, end: float) -> AsrFinal:
    return AsrFinal(text, start, end, detected_by="vad", detected_at_s=end + 0.6)


def test_a_fresh_final_utterance_is_the_question_and_the_answer_carries_a_deadline(standin):
    standin.script = [ScriptedReply(content="Canberra is the capital city of Australia.")]
    orch, sink = make(standin)
    try:
        frames(orch, 0, 29)
        orch.on_asr_event(final("What is the capital of Australia?", 0.5, 2.0))
        orch.on_engine_event(RetToken(30))  # 2.48 s: the final ended 0.48 s before
        events = collect_until(orch, lambda ev: of(oe.SpanQueued, ev))
    finally:
        assert orch.stop()
    question = of(oe.RetrievalQuestion, events)[0]
    assert (question.plan, question.ret_frame) == ("cache", 30)
    assert question.question == "what is the capital of australia?"  # lower-cased, as trained
    assert of(oe.TurnStarted, events)[0].trigger == "ret"
    assert sink.spans == [{"text": "Canberra is the capital city of Australia.", "source": "llm",
                           "origin_frame": 30, "deadline_frame": 30 + 31}]
    request = standin.requests[0]
    system, user = request["messages"][0]["content"], request["messages"][-1]["content"]
    assert "exactly one" in system and "name: Ada; city: Seoul" in system
    assert "what is the capital of australia?" in user
    assert request["tools"][0]["function"]["name"] == "calculator"


def test_the_end_of_the_users_turn_starts_nothing_without_ret(standin):
    orch, sink = make(standin)
    try:
        frames(orch, 0, 40)
        orch.on_asr_event(final("What is the capital of Australia?", 0.5, 2.0))
        frames(orch, 41, 60)
        time.sleep(0.5)
        assert orch.idle()
    finally:
        assert orch.stop()
    assert standin.requests == [] and sink.spans == []


def test_while_the_user_speaks_it_waits_for_the_final_utterance(standin):
    standin.script = [ScriptedReply(content="It is twelve degrees and cloudy in Seoul today.")]
    orch, sink = make(standin)
    try:
        frames(orch, 0, 20)
        orch.on_asr_event(AsrPartial("what is the weather", 0.8, 1.6))
        orch.on_engine_event(RetToken(21))
        frames(orch, 22, 26)  # 0.4 s later the user finishes
        orch.on_asr_event(final("What is the weather like", 0.8, 2.0))
        events = collect_until(orch, lambda ev: of(oe.SpanQueued, ev))
    finally:
        assert orch.stop()
    question = of(oe.RetrievalQuestion, events)[0]
    assert (question.plan, question.question) == ("wait", "what is the weather like")
    assert question.waited_ms == pytest.approx(5 * 80.0)


def test_a_wait_that_times_out_takes_the_last_seconds_of_speech(standin):
    standin.script = [ScriptedReply(content="The Eiffel Tower is about 330 metres tall.")]
    orch, sink = make(standin)
    try:
        frames(orch, 0, 20)
        for i, word in enumerate(["how", "tall", "is", "the", "eiffel", "tower"]):
            orch.on_asr_event(AsrWord(word, 0.4 + 0.2 * i, 0.55 + 0.2 * i))
        orch.on_asr_event(AsrPartial("how tall is the eiffel tower", 0.4, 1.55))
        orch.on_engine_event(RetToken(21))
        frames(orch, 22, 36)  # no final within 1 s (12.5 frames)
        events = collect_until(orch, lambda ev: of(oe.SpanQueued, ev))
    finally:
        assert orch.stop()
    question = of(oe.RetrievalQuestion, events)[0]
    assert (question.plan, question.question) == ("wait", "how tall is the eiffel tower")
    assert question.waited_ms == pytest.approx(12 * 80.0)


def test_without_a_fresh_final_the_window_of_recent_speech_is_the_question(standin):
    standin.script = [ScriptedReply(content="Water boils at one hundred degrees Celsius.")]
    orch, sink = make(standin)
    try:
        for i, word in enumerate(["at", "what", "temperature", "does", "water", "boil"]):
            orch.on_asr_event(AsrWord(word, 1.0 + 0.25 * i, 1.2 + 0.25 * i))
        orch.on_asr_event(final("At what temperature does water boil", 1.0, 2.7))
        frames(orch, 0, 99)
        orch.on_engine_event(RetToken(100))  # 8 s: the final is 5 s old, the words 12 s recent
        events = collect_until(orch, lambda ev: of(oe.SpanQueued, ev))
    finally:
        assert orch.stop()
    question = of(oe.RetrievalQuestion, events)[0]
    assert (question.plan, question.question) == (
        "window", "at what temperature does water boil")


def test_no_information_injects_nothing_and_a_tools_result_is_read_as_such(standin):
    standin.script = [
        ScriptedReply(content="(no information found)"),
        ScriptedReply(tool_calls=[{"name": "calculator", "arguments": {"expression": "6*7"}}]),
    ]
    orch, sink = make(standin)
    try:
        frames(orch, 0, 20)
        orch.on_asr_event(final("What is my favourite colour?", 0.2, 1.5))
        orch.on_engine_event(RetToken(21))
        first = collect_until(orch, lambda ev: of(oe.NoSpan, ev))
        frames(orch, 22, 60)
        orch.on_asr_event(final("What is six times seven?", 3.5, 4.6))
        orch.on_engine_event(RetToken(61))
        second = collect_until(orch, lambda ev: of(oe.SpanQueued, ev))
    finally:
        assert orch.stop()
    assert of(oe.NoSpan, first)[0].reason == "the LLM found no information"
    assert sink.spans[0]["text"] == "(tool result) 6*7 = 42"
    assert sink.spans[0]["source"] == "llm+calculator"
    assert of(oe.ToolCalled, second)[0].ok
    assert len(sink.spans) == 1


def test_nothing_heard_asks_nothing(standin):
    orch, sink = make(standin)
    try:
        frames(orch, 0, 30)
        orch.on_engine_event(RetToken(31))
        events = collect_until(orch, lambda ev: of(oe.NoSpan, ev))
    finally:
        assert orch.stop()
    assert of(oe.NoSpan, events)[0].reason == "nothing was heard"
    assert standin.requests == [] and sink.spans == []


def test_an_answer_after_the_deadline_is_dropped_and_said(standin):
    standin.script = [ScriptedReply(content="Canberra is the capital of Australia.",
                                    first_token_delay_s=0.6)]
    orch, sink = make(standin)
    try:
        frames(orch, 0, 29)
        orch.on_asr_event(final("What is the capital of Australia?", 0.5, 2.0))
        orch.on_engine_event(RetToken(30))
        frames(orch, 31, 62)  # 2.56 s of conversation pass before the LLM answers
        events = collect_until(orch, lambda ev: of(oe.RetrievalLate, ev))
    finally:
        assert orch.stop()
    late = of(oe.RetrievalLate, events)[0]
    assert late.seconds == pytest.approx(32 * 0.08) and late.question.startswith("what is")
    assert sink.spans == []


def test_a_second_ret_while_one_is_pending_is_ignored_and_the_next_one_after_counts(standin):
    standin.script = [ScriptedReply(content="Canberra is the capital of Australia.")] * 2
    orch, sink = make(standin)
    try:
        frames(orch, 0, 29)
        orch.on_asr_event(final("What is the capital of Australia?", 0.5, 2.0))
        orch.on_engine_event(RetToken(30))
        orch.on_engine_event(RetToken(31))
        events = collect_until(orch, lambda ev: of(oe.SpanQueued, ev))
        orch.on_engine_event(RetToken(33))  # the span has not landed yet: still pending
        # The engine drops it (late at the frame loop): the next <ret> is heard.
        orch.on_engine_event(SpanLate(1, "llm", "Canberra…", 30, 62, 2.56))
        frames(orch, 30, 69)
        orch.on_asr_event(final("And of Canada?", 4.5, 5.2))
        orch.on_engine_event(RetToken(70))
        events += collect_until(orch, lambda ev: len(of(oe.SpanQueued, ev)) == 1)
        orch.on_engine_event(SpanInjected(2, "llm", 72, 72, 12, 1, origin_frame=70))
        frames(orch, 70, 89)
        orch.on_asr_event(final("And of Peru?", 6.2, 6.9))
        orch.on_engine_event(RetToken(90))
        events += collect_until(orch, lambda ev: of(oe.RetrievalQuestion, ev))
    finally:
        assert orch.stop()
    ignored = of(oe.RetrievalIgnored, events)
    assert [i.ret_frame for i in ignored] == [31, 33]
    assert [q.ret_frame for q in of(oe.RetrievalQuestion, events)] == [30, 70, 90]


def test_the_tracker_and_the_no_information_reading():
    tracker = UtteranceTracker(window_s=12.0)
    tracker.on_partial(AsrPartial("hello", 1.0, 1.5))
    assert tracker.speaking
    tracker.on_final(final("hello there", 1.0, 2.0))
    assert not tracker.speaking
    assert tracker.plan(4.9, POLICY).plan == "cache"
    assert tracker.plan(5.1, POLICY).plan == "window"
    assert is_no_information("(No information found.)")
    assert not is_no_information("The information desk is found on the left.")
