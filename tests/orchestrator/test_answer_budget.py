"""The LLM is told the span budget the engine measured (EngineReady.span_tokens) and its
answer is cut to it: the real `ollama` client against the stand-in server."""

from __future__ import annotations

import contextlib
import queue
import time

import numpy as np
import pytest

from app.asr.events import AsrFinal
from app.checkpoints.catalog import Retrieval
from app.engine.events import AudioOut, EngineReady, RetToken
from app.llm.ollama_backend import OllamaBackend, OllamaSettings
from app.llm.ollama_standin import OllamaStandIn, ScriptedReply
from app.orchestrator import events as oe
from app.orchestrator.orchestrator import Orchestrator, OrchestratorOptions
from app.tools.base import ToolRegistry

POLICY = Retrieval(trigger="ret_token", ret_id=4, deadline_s=2.5, lowercase_question=True)
LONG_ANSWER = ("Canberra is the capital city of Australia, chosen in 1908 as a compromise "
               "between Sydney and Melbourne, and it was built as a planned city. ") * 4


class RecordingSink:
    def __init__(self) -> None:
        self.texts: list[str] = []

    def inject(self, text: str, source: str, at_frame: int = 0,
               origin_frame: int | None = None, deadline_frame: int | None = None) -> int:
        self.texts.append(text)
        return len(self.texts)


@pytest.fixture()
def standin():
    with OllamaStandIn(models=("standin:latest",)) as server:
        yield server


def ask(standin, ready: EngineReady | None, known_tokens: int = 0) -> tuple[dict, str]:
    """One <ret> retrieval after `ready`: the request the LLM got and the span injected.
    `known_tokens`: the budget the orchestrator is made with (an engine already ready)."""
    standin.script = [ScriptedReply(content=LONG_ANSWER)]
    backend = OllamaBackend(OllamaSettings(host=standin.url, model="standin:latest",
                                           timeout_s=5.0, connect_timeout_s=1.0))
    sink = RecordingSink()
    orch = Orchestrator(backend, ToolRegistry([]), sink,
                        OrchestratorOptions(max_span_chars=600, retrieval=POLICY,
                                            span_tokens=known_tokens))
    orch.start()
    try:
        if ready is not None:
            orch.on_engine_event(ready)
        for index in range(30):
            orch.on_engine_event(AudioOut(index, np.zeros(1920, np.float32)))
        orch.on_asr_event(AsrFinal("What is the capital of Australia?", 0.5, 2.0,
                                   detected_by="vad", detected_at_s=2.6))
        orch.on_engine_event(RetToken(30))
        deadline = time.monotonic() + 10.0
        while not sink.texts and time.monotonic() < deadline:
            with contextlib.suppress(queue.Empty):
                if isinstance(orch.events.get(timeout=0.05), (oe.TurnFailed, oe.NoSpan)):
                    break
    finally:
        assert orch.stop()
    assert sink.texts, "nothing was injected"
    return standin.requests[-1], sink.texts[0]


def ready_with(span_tokens: int) -> EngineReady:
    return EngineReady("tiny-cs", "cpu", "float32", chunk_limit=span_tokens + 2, step_ms=5.0,
                       budget_ms=60.0, context_window=3000, prompt_frames=0,
                       span_tokens=span_tokens)


def test_the_llm_hears_the_measured_budget_and_the_answer_is_cut_to_it(standin):
    request, span = ask(standin, ready_with(40))
    system = request["messages"][0]["content"]
    assert "at most 40 tokens" in system
    assert len(span) <= 40 * 3  # about three characters a token

    request, span = ask(standin, ready_with(150))  # a faster device: a longer answer
    assert "at most 150 tokens" in request["messages"][0]["content"]
    assert 40 * 3 < len(span) <= 150 * 3


def test_before_the_engine_is_ready_the_manifests_limit_holds(standin):
    request, span = ask(standin, None)
    assert "tokens (about" not in request["messages"][0]["content"]
    assert len(span) <= 600


def test_an_orchestrator_made_after_the_engine_was_ready_knows_the_budget(standin):
    """The LLM turned on mid-conversation: EngineReady has passed, the budget comes with
    the options (build_orchestrator passes the engine's measured one)."""
    request, span = ask(standin, None, known_tokens=40)
    assert "at most 40 tokens" in request["messages"][0]["content"]
    assert len(span) < len(LONG_ANSWER) and len(span) <= 40 * 3
