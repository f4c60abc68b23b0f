"""The orchestrator with the real `ollama` client against the stand-in Ollama server."""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest

from app.asr.events import AsrFinal, AsrPartial
from app.engine.events import AudioOut, FirstAudioAfterSpan, SpanInjected
from app.llm.ollama_backend import OllamaBackend, OllamaSettings
from app.llm.ollama_standin import OllamaStandIn, ScriptedReply
from app.orchestrator import events as oe
from app.orchestrator.orchestrator import Orchestrator, OrchestratorOptions
from app.tools.base import Tool, ToolRegistry, ToolResult
from tests.waiting import wait_until


class FactTool(Tool):
    """A real tool in the registry: returns a fixed fact, or a flood of text."""

    name = "lookup"
    description = "Look up a fact."
    parameters = {"type": "object", "properties": {"query": {"type": "string"}},
                  "required": ["query"]}

    def __init__(self, text: str = "Canberra is the capital of Australia.") -> None:
        self.text = text

    def run(self, arguments: Mapping[str, Any], cancel: threading.Event | None = None
            ) -> ToolResult:
        return ToolResult(self.name, self.text, source="facts")


class RecordingSink:
    """Stands where the engine's non-blocking `inject` is (tested on its own elsewhere)."""

    def __init__(self) -> None:
        self.spans: list[tuple[str, str]] = []

    def inject(self, text: str, source: str, at_frame: int = 0) -> int:
        self.spans.append((text, source))
        return len(self.spans)


def collect_until(orch: Orchestrator, done, timeout: float = 10.0) -> list:
    events, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(queue.Empty):
            events.append(orch.events.get(timeout=0.05))
        if done(events):
            return events
    raise AssertionError(f"timed out; events so far: {events}")


def of(kind, events):
    return [e for e in events if isinstance(e, kind)]


@pytest.fixture()
def standin():
    with OllamaStandIn(models=("standin:latest",)) as server:
        yield server


def make(standin: OllamaStandIn, tool: Tool | None = None, timeout_s: float = 5.0):
    backend = OllamaBackend(OllamaSettings(host=standin.url, model="standin:latest",
                                           timeout_s=timeout_s, connect_timeout_s=1.0))
    sink = RecordingSink()
    orch = Orchestrator(backend, ToolRegistry([tool or FactTool()]), sink,
                        OrchestratorOptions(max_span_chars=300))
    orch.start()
    return orch, sink


def final(text: str, start: float = 1.0, end: float = 3.0) -> AsrFinal:
    return AsrFinal(text, start, end, detected_by="vad", detected_at_s=end + 0.6)


def test_end_of_turn_runs_the_tool_loop_and_queues_a_speakable_span(standin):
    standin.script = [
        ScriptedReply(tool_calls=[{"name": "lookup", "arguments": {"query": "capital"}}]),
        ScriptedReply(content="**Canberra** is the capital of Australia."),
    ]
    orch, sink = make(standin)
    try:
        orch.on_asr_event(final("What is the capital of Australia?"))
        events = collect_until(orch, lambda ev: of(oe.SpanQueued, ev))
    finally:
        assert orch.stop()
    started = of(oe.TurnStarted, events)[0]
    assert started.trigger == "end_of_turn" and "capital" in started.question
    call = of(oe.ToolCalled, events)[0]
    assert call.tool == "lookup" and call.ok and call.arguments == {"query": "capital"}
    assert sink.spans == [("Canberra is the capital of Australia.", "llm+lookup")]
    assert [s.state for s in of(oe.LlmStatus, events)] == ["thinking", "idle"]
    second = standin.requests[1]
    roles = [m["role"] for m in second["messages"]]
    assert roles[0] == "system" and roles[-2:] == ["assistant", "tool"]
    assert second["messages"][-1]["content"] == "Canberra is the capital of Australia."
    assert second["tools"][0]["function"]["name"] == "lookup"


def test_a_clear_question_mid_turn_is_asked_once(standin):
    standin.script = [ScriptedReply(content="Canberra.", first_token_delay_s=1.0)]
    orch, sink = make(standin)
    try:
        question = "What is the capital of Australia?"
        orch.on_asr_event(AsrPartial("What is the", 1.0, 1.6))
        orch.on_asr_event(AsrPartial(question, 1.0, 2.8))
        orch.on_asr_event(final(question))
        events = collect_until(orch, lambda ev: of(oe.SpanQueued, ev))
    finally:
        assert orch.stop()
    assert [t.trigger for t in of(oe.TurnStarted, events)] == ["mid_turn"]
    assert len(standin.requests) == 1 and sink.spans == [("Canberra.", "llm")]


def test_a_stale_request_is_cancelled_when_the_user_speaks_again(standin):
    standin.script = lambda body: (
        ScriptedReply(content="Old answer.", first_token_delay_s=10.0)
        if "weather" in body["messages"][-1]["content"] else ScriptedReply(content="New answer.")
    )
    orch, sink = make(standin)
    try:
        orch.on_asr_event(final("What is the weather in Paris?", 1.0, 3.0))
        collect_until(orch, lambda ev: of(oe.TurnStarted, ev))
        orch.on_asr_event(AsrPartial("No wait, tell me about Berlin", 5.0, 6.5))
        orch.on_asr_event(final("No wait, tell me about Berlin", 5.0, 6.5))
        events = collect_until(orch, lambda ev: of(oe.SpanQueued, ev), timeout=10)
        # Let the stale request finish (or notice its cancel) before judging.
        wait_until(orch.idle, 10, interval=0.05, message="the stale request never ended")
    finally:
        assert orch.stop()
    assert of(oe.TurnCancelled, events)[0].reason == "the user spoke again"
    assert sink.spans == [("New answer.", "llm")]


def test_a_backchannel_does_not_cancel_the_answer(standin):
    standin.script = [ScriptedReply(content="Canberra.", first_token_delay_s=1.0)]
    orch, sink = make(standin)
    try:
        orch.on_asr_event(final("What is the capital of Australia?"))
        orch.on_asr_event(AsrPartial("mm", 4.0, 4.2))
        events = collect_until(orch, lambda ev: of(oe.SpanQueued, ev))
    finally:
        assert orch.stop()
    assert not of(oe.TurnCancelled, events) and sink.spans == [("Canberra.", "llm")]


@pytest.mark.parametrize(
    ("reply", "kind"),
    [(ScriptedReply(malformed=True, content="half an answer and"), "malformed"),
     (ScriptedReply(status=500, error="out of memory"), "http")],
)
def test_a_failing_backend_shows_a_status_and_the_next_turn_works(standin, reply, kind):
    standin.script = [reply, ScriptedReply(content="Recovered.")]
    orch, sink = make(standin)
    try:
        orch.on_typed_text("first question")
        events = collect_until(orch, lambda ev: of(oe.TurnFailed, ev))
        orch.on_typed_text("second question")
        events += collect_until(orch, lambda ev: of(oe.SpanQueued, ev))
    finally:
        assert orch.stop()
    assert of(oe.TurnFailed, events)[0].kind == kind
    assert any(s.state == "error" for s in of(oe.LlmStatus, events))
    assert sink.spans == [("Recovered.", "llm")]


def test_an_unreachable_backend_fails_the_turn_quickly():
    with OllamaStandIn() as server:
        url = server.url
    backend = OllamaBackend(OllamaSettings(host=url, model="m", timeout_s=2, connect_timeout_s=1))
    orch = Orchestrator(backend, ToolRegistry([]), RecordingSink())
    orch.start()
    try:
        orch.on_typed_text("hello?")
        events = collect_until(orch, lambda ev: of(oe.TurnFailed, ev))
    finally:
        assert orch.stop()
    failed = of(oe.TurnFailed, events)[0]
    assert failed.kind == "unreachable" and url.split("//")[1] in failed.message


def test_unknown_tools_and_enormous_results_are_contained(standin):
    standin.script = [
        ScriptedReply(tool_calls=[{"name": "format_disk", "arguments": {}},
                                  {"name": "lookup", "arguments": {"query": "x"}}]),
        ScriptedReply(content="Here is what I found."),
    ]
    orch, sink = make(standin, tool=FactTool("spam " * 100_000))
    try:
        orch.on_typed_text("look it up")
        events = collect_until(orch, lambda ev: of(oe.SpanQueued, ev))
    finally:
        assert orch.stop()
    unknown, lookup = of(oe.ToolCalled, events)
    assert not unknown.ok and "unknown tool" in unknown.error
    assert lookup.ok and lookup.truncated and lookup.chars <= 4000
    tool_messages = [m for m in standin.requests[1]["messages"] if m["role"] == "tool"]
    assert tool_messages[0]["content"].startswith("error: unknown tool")
    assert len(tool_messages[1]["content"]) <= 4000
    assert sink.spans == [("Here is what I found.", "llm+lookup")]


def test_every_stage_of_a_turn_is_timed_up_to_the_first_audio_frame(standin):
    standin.script = [ScriptedReply(content="Canberra is the capital.")]
    orch, _ = make(standin)
    try:
        orch.on_asr_event(final("What is the capital of Australia?"))
        collect_until(orch, lambda ev: of(oe.SpanQueued, ev))
        orch.on_engine_event(SpanInjected(1, "llm", 40, 41, 12, 1))
        audio = AudioOut(41, np.zeros(1920, np.float32))
        orch.on_engine_event(audio)
        # As the engine does: right after the first frame made since the span landed.
        orch.on_engine_event(FirstAudioAfterSpan(1, 41, audio.monotonic_s))
        events = collect_until(orch, lambda ev: of(oe.TurnLatency, ev))
    finally:
        assert orch.stop()
    latency = of(oe.TurnLatency, events)[0]
    stages = [latency.end_of_speech_to_turn_ms, latency.turn_to_first_token_ms,
              latency.first_token_to_span_ready_ms, latency.span_ready_to_injected_ms,
              latency.injected_to_first_audio_ms, latency.end_of_speech_to_first_audio_ms]
    assert all(s is not None for s in stages)
    assert latency.end_of_speech_to_turn_ms >= 600 - 1  # the VAD hang counts from speech end
    assert latency.end_of_speech_to_first_audio_ms >= max(stages[:-1])


def test_a_model_that_keeps_calling_tools_fails_the_turn_visibly(standin):
    """After the last allowed round (tools withheld) a model still asking for tools has given
    no answer: the user sees a failed turn, not silence, and the next turn works."""
    looping = ScriptedReply(tool_calls=[{"name": "lookup", "arguments": {"query": "again"}}])
    standin.script = [looping] * 4 + [ScriptedReply(content="Recovered.")]
    orch, sink = make(standin)
    try:
        orch.on_typed_text("what is the capital?")
        events = collect_until(orch, lambda ev: of(oe.TurnFailed, ev))
        orch.on_typed_text("and now?")
        events += collect_until(orch, lambda ev: of(oe.SpanQueued, ev))
    finally:
        assert orch.stop()
    failed = of(oe.TurnFailed, events)
    assert len(failed) == 1 and failed[0].kind == "malformed"
    assert "kept calling tools after 3 rounds" in failed[0].message
    assert len(of(oe.ToolCalled, events)) == 3  # the last round offered no tools
    assert "tools" not in standin.requests[3] or not standin.requests[3]["tools"]
    assert any(s.state == "error" for s in of(oe.LlmStatus, events))
    assert sink.spans == [("Recovered.", "llm")]


def test_an_empty_answer_is_a_failed_turn(standin):
    standin.script = [ScriptedReply(content="   ")]
    orch, sink = make(standin)
    try:
        orch.on_typed_text("hello?")
        events = collect_until(orch, lambda ev: of(oe.TurnFailed, ev))
    finally:
        assert orch.stop()
    assert "nothing to say" in of(oe.TurnFailed, events)[0].message
    assert sink.spans == []


def test_stop_closes_the_llm_clients_and_the_local_search_index(standin, tmp_path):
    """Connections and the index's database are released when the conversation ends, also
    those of an LLM side replaced mid-conversation (a settings change)."""
    import sqlite3

    from app.tools.local_search import LocalFolderSearchTool

    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "gate.txt").write_text("The gate code is 417.", encoding="utf-8")
    search = LocalFolderSearchTool([notes], index_dir=tmp_path / "index")
    standin.script = [ScriptedReply(content="It is 417.")]
    orch, _sink = make(standin, search)
    first = orch.backend
    orch.on_typed_text("what is the gate code?")
    collect_until(orch, lambda ev: of(oe.SpanQueued, ev))
    second = OllamaBackend(OllamaSettings(host=standin.url, model="standin:latest"))
    orch.reconfigure(second, ToolRegistry([FactTool()]))
    assert not first._client._client.is_closed and not second._client._client.is_closed
    assert orch.stop()
    assert first._client._client.is_closed and second._client._client.is_closed
    with pytest.raises(sqlite3.ProgrammingError):
        search._db.execute("SELECT 1")
