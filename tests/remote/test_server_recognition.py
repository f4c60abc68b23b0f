"""The server's recognition (`user_text`) read back as a local recogniser's events, so the
orchestrator's questions, turn ends and <ret> windows work from it as from a local one; and
through the real pipeline into a real orchestrator, a turn ended by the server's final asks
the LLM (the stand-in) what the server heard."""

from __future__ import annotations

import contextlib
import queue
import time
from collections.abc import Callable

import numpy as np

from app.asr.events import AsrError, AsrFinal, AsrPartial, AsrWord
from app.conversation.pipeline import ConversationPipeline
from app.engine import events as ev
from app.llm.factory import make_backend
from app.llm.ollama_standin import OllamaStandIn, ScriptedReply
from app.orchestrator import events as oe
from app.orchestrator.orchestrator import Orchestrator, OrchestratorOptions
from app.orchestrator.retrieval import UtteranceTracker
from app.remote.engine_events import (
    END_OF_TURN_BY_SERVER,
    QUIET_RECOGNITION_FRAMES,
    EngineEventMapper,
)
from app.tools.base import ToolRegistry
from app.wire import events as wire

SILENCE = np.zeros(1920, dtype=np.float32)


def _heard(mapper: EngineEventMapper, *texts: tuple[str, float], utt: int = 25,
           final: bool = True) -> list[object]:
    out: list[object] = []
    for index, (text, t) in enumerate(texts):
        last = final and index == len(texts) - 1
        out += mapper.map(wire.UserText(utt=utt, final=last, t=t, text=text))
    return out


def test_partials_grow_word_by_word_and_the_final_ends_the_turn() -> None:
    mapper = EngineEventMapper(asr=True)
    mapper.new_conversation(wire.Ready(context_window=100))
    events = _heard(mapper, ("what", 2.2), ("what is", 2.5), ("what is the capital", 3.1),
                    ("what is the capital", 3.4))
    words = [e for e in events if isinstance(e, AsrWord)]
    assert [w.text for w in words] == ["what", "is", "the", "capital"]
    assert [w.end_s for w in words] == [2.2, 2.5, 3.1, 3.1]  # each ends with its partial
    assert all(w.start_s <= w.end_s for w in words)
    partials = [e for e in events if isinstance(e, AsrPartial)]
    assert [p.text for p in partials] == ["what", "what is", "what is the capital"]
    assert all(p.start_s == 2.0 for p in partials)  # utterance 25 = frame 25 = 2.0 s
    final = events[-1]
    assert isinstance(final, AsrFinal) and final.text == "what is the capital"
    assert (final.start_s, final.end_s, final.detected_by) == (2.0, 3.4, END_OF_TURN_BY_SERVER)


def test_a_ret_window_is_made_of_the_servers_words() -> None:
    mapper = EngineEventMapper(asr=True)
    mapper.new_conversation(wire.Ready(context_window=100))
    tracker = UtteranceTracker()
    for event in _heard(mapper, ("tell me", 1.0), ("tell me about", 1.4),
                        ("tell me about lyon", 2.0), final=False):
        if isinstance(event, AsrWord):
            tracker.on_word(event)
        elif isinstance(event, AsrPartial):
            tracker.on_partial(event)
    assert tracker.speaking  # a partial with no final: the user is still speaking
    assert tracker.window(2.0, 10.0) == "tell me about lyon"


def test_after_a_reconnect_the_servers_times_move_onto_the_apps_clock() -> None:
    mapper = EngineEventMapper(asr=True)
    mapper.new_conversation(wire.Ready(context_window=100))
    for _ in range(50):  # 4 s of the first conversation
        mapper.audio(SILENCE)
    _heard(mapper, ("half", 1.0), final=False)
    mapper.new_conversation(wire.Ready(context_window=100))  # the connection came back
    events = _heard(mapper, ("hello", 0.5), utt=0)
    final = events[-1]
    assert isinstance(final, AsrFinal) and (final.start_s, final.end_s) == (4.0, 4.5)
    # The utterance cut by the drop is not continued by the new conversation's words.
    assert [w.text for w in events if isinstance(w, AsrWord)] == ["hello"]


def test_a_server_that_sends_no_words_is_said_once_to_perhaps_run_without_recognition(
        ) -> None:
    mapper = EngineEventMapper(asr=True)
    mapper.new_conversation(wire.Ready(context_window=100))
    said = []
    for _ in range(QUIET_RECOGNITION_FRAMES * 2):
        mapper.audio(SILENCE)
        said += mapper.quiet_recognition()
    assert len(said) == 1 and isinstance(said[0], AsrError) and not said[0].fatal
    assert "serve --asr" in said[0].message
    # One word from the server: nothing to say.
    heard = EngineEventMapper(asr=True)
    heard.new_conversation(wire.Ready(context_window=100))
    heard.map(wire.UserText(utt=1, t=0.3, text="hi"))
    for _ in range(QUIET_RECOGNITION_FRAMES * 2):
        heard.audio(SILENCE)
        assert heard.quiet_recognition() == []


def test_without_the_servers_recognition_its_words_are_not_the_users() -> None:
    mapper = EngineEventMapper()  # recognition on this computer
    mapper.new_conversation(wire.Ready(context_window=100))
    assert _heard(mapper, ("what", 1.0)) == []


class _ServerWords:
    """Stands where the pipeline's engine is, as a RemoteEngine does: its events (what the
    mapper makes of the server's messages) go to the sink the pipeline gave."""

    def __init__(self) -> None:
        self.events: queue.SimpleQueue = queue.SimpleQueue()
        self.dropped_frames = 0
        self.mapper = EngineEventMapper(asr=True)
        self.injected: list[str] = []
        self.running = True
        self.put = self.events.put

    def send_events_to(self, sink: Callable[[object], None]) -> None:
        self.put = sink

    def start(self) -> None:
        self.mapper.new_conversation(wire.Ready(context_window=300))
        self.put(ev.EngineReady("tiny", "server", "", 0, None, 80.0, 300, 0))

    def push_frame(self, pcm: np.ndarray, timeout: float | None = 0.0) -> bool:
        audio, stats = self.mapper.audio(pcm)
        self.put(audio)
        self.put(stats)
        return True

    def say(self, message: wire.ServerEvent) -> None:
        for event in self.mapper.map(message):
            self.put(event)

    def inject(self, text: str, source: str, at_frame: int = 0,
               origin_frame: int | None = None, deadline_frame: int | None = None) -> int:
        self.injected.append(text)
        return len(self.injected)

    def finish_input(self, timeout: float | None = 10.0) -> None:
        pass

    def stop(self, timeout: float = 10.0) -> bool:
        self.put(ev.EngineStopped(self.mapper.frames, "stopped"))
        return True


def test_the_servers_final_takes_the_pipelines_road_to_the_llm() -> None:
    engine = _ServerWords()
    with OllamaStandIn(models=("standin:latest",),
                       script=[ScriptedReply(content="Canberra.")]) as standin:
        backend = make_backend("ollama", standin.url, "standin:latest")
        orchestrator = Orchestrator(backend, ToolRegistry(), engine,  # type: ignore[arg-type]
                                    OrchestratorOptions(retrieval=None))
        pipeline = ConversationPipeline(engine, None, orchestrator)  # type: ignore[arg-type]
        pipeline.start()
        try:
            for _ in range(30):
                pipeline.push_frame(SILENCE)
            engine.say(wire.UserText(utt=5, final=False, t=1.0, text="capital of"))
            engine.say(wire.UserText(utt=5, final=True, t=1.6, text="capital of australia"))
            seen: list[object] = []
            deadline = time.monotonic() + 60
            while not engine.injected and time.monotonic() < deadline:
                with contextlib.suppress(queue.Empty):
                    seen.append(pipeline.events.get(timeout=0.2))
        finally:
            pipeline.stop(10.0)
        asked = standin.requests[0]["messages"][-1]["content"]
    turns = [e for e in seen if isinstance(e, oe.TurnStarted)]
    assert turns and turns[0].question == "capital of australia"
    assert turns[0].trigger == "end_of_turn"
    assert asked == "capital of australia"
    assert engine.injected == ["Canberra."]

