"""A <ret>'s retrieval reads what the model has said while the model goes on talking.

The conversation log belongs to the orchestrator's control thread, which appends the model's
words as they come; the retrieval's worker thread must get a snapshot of them, not the live
log (iterating it while it grows was "deque mutated during iteration": a failed retrieval).
"""

from __future__ import annotations

import contextlib
import queue
import sys
import time

import numpy as np
import pytest

from app.asr.events import AsrFinal
from app.checkpoints.catalog import Retrieval
from app.engine.events import AudioOut, RetToken, TextPiece
from app.llm.ollama_backend import OllamaBackend, OllamaSettings
from app.llm.ollama_standin import OllamaStandIn, ScriptedReply
from app.orchestrator import events as oe
from app.orchestrator.conversation_log import ASSISTANT_GAP_FRAMES
from app.orchestrator.orchestrator import Orchestrator, OrchestratorOptions
from app.tools.base import ToolRegistry

POLICY = Retrieval(trigger="ret_token", ret_id=4, deadline_s=2.5, lowercase_question=True)
# Long utterances make reading the log take a while (milliseconds), so the control thread,
# busy with the model's next words, gets its turn in the middle of a read.
LONG_WORDS = "word " * 400_000


class RecordingSink:
    def __init__(self) -> None:
        self.spans: list[str] = []

    def inject(self, text: str, source: str, at_frame: int = 0,
               origin_frame: int | None = None, deadline_frame: int | None = None) -> int:
        self.spans.append(text)
        return len(self.spans)


@pytest.fixture()
def fast_thread_switches():
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    yield
    sys.setswitchinterval(before)


def test_a_retrieval_while_the_model_talks_on_is_answered(fast_thread_switches):
    with OllamaStandIn(models=("standin:latest",)) as standin:
        standin.script = [ScriptedReply(content="Canberra is the capital city of Australia.")]
        backend = OllamaBackend(OllamaSettings(host=standin.url, model="standin:latest",
                                               timeout_s=10.0, connect_timeout_s=2.0))
        sink = RecordingSink()
        orch = Orchestrator(backend, ToolRegistry([]), sink,
                            OrchestratorOptions(retrieval=POLICY))
        orch.start()
        events: list[object] = []
        try:
            for index in range(30):
                orch.on_engine_event(AudioOut(index, np.zeros(1920, np.float32)))
            orch.on_asr_event(AsrFinal("What is the capital of Australia?", 0.5, 2.0,
                                       detected_by="vad", detected_at_s=2.6))
            frame = 0
            for _ in range(40):  # the log is full of the model's (long) utterances
                frame += ASSISTANT_GAP_FRAMES + 1
                orch.on_engine_event(TextPiece(frame, LONG_WORDS, 7))
            orch.on_engine_event(RetToken(30))
            deadline = time.monotonic() + 30.0
            # The model talks on while the retrieval's worker starts: a new utterance in
            # the log every moment.
            while time.monotonic() < deadline and not any(
                    isinstance(e, (oe.SpanQueued, oe.TurnFailed)) for e in events):
                for _ in range(50):
                    frame += ASSISTANT_GAP_FRAMES + 1
                    orch.on_engine_event(TextPiece(frame, LONG_WORDS, 7))
                time.sleep(0.001)
                with contextlib.suppress(queue.Empty):
                    while True:
                        events.append(orch.events.get_nowait())
        finally:
            assert orch.stop()
    failed = [e for e in events if isinstance(e, oe.TurnFailed)]
    assert not failed, failed
    assert sink.spans == ["Canberra is the capital city of Australia."]
