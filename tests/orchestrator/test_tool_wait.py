"""A tool that waits for the user's permission (an MCP server's tool that changes things)
does not stop the conversation: the voice is told to wait with a span at once, the answer
lands once the user allows it, and a <ret>'s deadline does not drop an answer the user was
asked about. Real parts: the orchestrator, the `ollama` client against the stand-in, a real
stdio MCP server made with the SDK, the consent broker answered from another thread."""

from __future__ import annotations

import contextlib
import queue
import time

import numpy as np
import pytest

from app.asr.events import AsrFinal
from app.checkpoints.catalog import Retrieval
from app.engine.events import AudioOut, RetToken
from app.llm.ollama_backend import OllamaBackend, OllamaSettings
from app.llm.ollama_standin import OllamaStandIn, ScriptedReply
from app.orchestrator import events as oe
from app.orchestrator.orchestrator import Orchestrator, OrchestratorOptions
from app.tools.base import ToolRegistry
from app.tools.mcp.consent import ConsentBroker
from app.tools.mcp.hub import McpHub
from app.tools.mcp.tool import waiting_text
from tests.tools.mcp.mcp_servers import stdio_server
from tests.waiting import wait_until

SILENT = np.zeros(1920, np.float32)
POLICY = Retrieval(trigger="ret_token", ret_id=4, deadline_s=2.5, lowercase_question=True)


class RecordingSink:
    def __init__(self) -> None:
        self.spans: list[dict] = []

    def inject(self, text: str, source: str, at_frame: int = 0,
               origin_frame: int | None = None, deadline_frame: int | None = None) -> int:
        self.spans.append({"text": text, "source": source, "deadline_frame": deadline_frame})
        return len(self.spans)


@pytest.fixture()
def calendar(tmp_path):
    broker = ConsentBroker(timeout_s=60.0)
    hub = McpHub(consent=broker)
    lease = hub.lease([stdio_server("calendar", "--events-file", str(tmp_path / "e.txt"))])
    assert lease.wait_settled(60.0)[0].state == "ready"
    detach = broker.attach_prompt()
    yield broker, ToolRegistry([], sources=[lease]), tmp_path / "e.txt"
    detach()
    hub.close_all()


def _script(body: dict) -> ScriptedReply:
    last = body["messages"][-1]
    if last["role"] == "tool":
        return ScriptedReply(content=f"Done: {last['content']}")
    return ScriptedReply(tool_calls=[{"name": "add_event",
                                      "arguments": {"title": "lunch", "day": "Friday"}}])


def make(standin: OllamaStandIn, registry: ToolRegistry, retrieval: Retrieval | None = None):
    backend = OllamaBackend(OllamaSettings(host=standin.url, model="standin:latest",
                                           timeout_s=10.0, connect_timeout_s=1.0))
    sink = RecordingSink()
    orch = Orchestrator(backend, registry, sink,
                        OrchestratorOptions(max_span_chars=300, retrieval=retrieval))
    orch.start()
    return orch, sink


def drain(orch: Orchestrator, events: list) -> None:
    with contextlib.suppress(queue.Empty):
        while True:
            events.append(orch.events.get(timeout=0.05))


def of(kind, events):
    return [e for e in events if isinstance(e, kind)]


def test_the_voice_is_told_to_wait_and_the_answer_lands_once_allowed(calendar):
    broker, registry, events_file = calendar
    with OllamaStandIn(script=_script) as standin:
        orch, sink = make(standin, registry)
        events: list = []
        try:
            orch.on_typed_text("Put lunch on Friday in my calendar.")
            wait_until(lambda: broker.pending(), 30, message="the tool never asked")
            wait_until(lambda: sink.spans, 10, message="the voice was never told to wait")
            # Asked, not answered: the voice knows, nothing has been done.
            assert sink.spans == [{"text": waiting_text("add_event", "calendar"),
                                   "source": "wait", "deadline_frame": None}]
            assert not events_file.exists()
            time.sleep(0.3)  # the conversation goes on meanwhile: frames keep coming
            for index in range(10):
                orch.on_engine_event(AudioOut(index, SILENT))
            broker.answer(broker.pending()[0].request_id, "allow")
            wait_until(lambda: len(sink.spans) == 2, 30, message="the answer never landed")
            drain(orch, events)
        finally:
            assert orch.stop()
    assert sink.spans[1]["text"] == "Done: Added 'lunch' on Friday (event E-17)."
    assert sink.spans[1]["source"] == "llm+add_event"
    assert events_file.read_text() == "lunch|Friday\n"
    waiting = of(oe.ToolWaiting, events)[0]
    assert (waiting.tool, waiting.server, waiting.span_id) == ("add_event", "calendar", 1)
    called = of(oe.ToolCalled, events)[0]
    assert called.ok and called.server == "calendar" and called.server_tool == "add_event"
    assert called.result == "Added 'lunch' on Friday (event E-17)."
    assert called.elapsed_ms is not None


def test_a_ret_answer_the_user_was_asked_about_is_not_dropped_as_late(calendar):
    broker, registry, events_file = calendar
    with OllamaStandIn(script=_script) as standin:
        orch, sink = make(standin, registry, POLICY)
        events: list = []
        try:
            for index in range(30):
                orch.on_engine_event(AudioOut(index, SILENT))
            orch.on_asr_event(AsrFinal("put lunch on friday in my calendar", 0.5, 2.0,
                                       detected_by="vad", detected_at_s=2.6))
            orch.on_engine_event(RetToken(30))
            wait_until(lambda: broker.pending(), 30, message="the tool never asked")
            # 8 s of conversation pass while the user reads the question: past the 2.5 s.
            for index in range(30, 130):
                orch.on_engine_event(AudioOut(index, SILENT))
            broker.answer(broker.pending()[0].request_id, "allow")
            wait_until(lambda: len(sink.spans) == 2, 30, message="the answer never landed")
            drain(orch, events)
        finally:
            assert orch.stop()
    assert sink.spans[0]["source"] == "wait"
    answer = sink.spans[1]
    assert answer["text"] == "(tool result) Added 'lunch' on Friday (event E-17)."
    assert answer["deadline_frame"] is None
    assert not of(oe.RetrievalLate, events)
    assert events_file.read_text() == "lunch|Friday\n"


class BusySink(RecordingSink):
    """The engine of a busy conversation: telling the voice to wait takes the control
    thread so long that the user has answered and the call is done in the meantime (here:
    until the LLM has the call's result, its next request)."""

    def __init__(self, broker: ConsentBroker, standin: OllamaStandIn) -> None:
        super().__init__()
        self.broker, self.standin = broker, standin

    def inject(self, text: str, source: str, at_frame: int = 0,
               origin_frame: int | None = None, deadline_frame: int | None = None) -> int:
        if source == "wait":
            self.broker.answer(self.broker.pending()[0].request_id, "allow")
            wait_until(lambda: len(self.standin.requests) >= 2, 30,
                       message="the call never went on after the user allowed it")
        return super().inject(text, source, at_frame, origin_frame, deadline_frame)


def test_the_permission_notice_comes_before_the_call_it_asked_about(calendar):
    """The transcript and the JSONL show what happened in order: "add_event waits for your
    permission", then the call and its result, however late the control thread gets to the
    notice (it used to come after the call, which the worker reported itself)."""
    broker, registry, _events_file = calendar
    with OllamaStandIn(script=_script) as standin:
        backend = OllamaBackend(OllamaSettings(host=standin.url, model="standin:latest",
                                               timeout_s=10.0, connect_timeout_s=1.0))
        sink = BusySink(broker, standin)
        orch = Orchestrator(backend, registry, sink, OrchestratorOptions(max_span_chars=300))
        orch.start()
        events: list = []
        try:
            orch.on_typed_text("Put lunch on Friday in my calendar.")
            wait_until(lambda: len(sink.spans) == 2, 30, message="the answer never landed")
            wait_until(lambda: drain(orch, events) or of(oe.SpanQueued, events), 10,
                       message="the answer's span was never said")
        finally:
            assert orch.stop()
    kinds = [type(e) for e in events if isinstance(e, (oe.ToolWaiting, oe.ToolCalled,
                                                         oe.SpanQueued))]
    assert kinds == [oe.ToolWaiting, oe.ToolCalled, oe.SpanQueued]
