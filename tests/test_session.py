"""A live session without Qt: the tiny model, a file as the microphone, the stand-in LLM."""

from __future__ import annotations

import threading
import time

import numpy as np

from app.audio.file_source import FileAudioSource
from app.llm.ollama_standin import OllamaStandIn, ScriptedReply
from app.session import CheckpointCache, ConversationSession
from app.settings.schema import AppSettings, LlmSettings, SpeechModelSettings


class Recorder:
    def __init__(self) -> None:
        self.states: list[tuple[str, str]] = []
        self.entries: dict[int, object] = {}
        self.statuses: list = []
        self.changed = threading.Condition()

    def on_state(self, state, detail):
        with self.changed:
            self.states.append((state, detail))
            self.changed.notify_all()

    def on_entry(self, entry):
        with self.changed:
            self.entries[entry.entry_id] = entry
            self.changed.notify_all()

    def on_status(self, status):
        self.statuses.append(status)

    def wait(self, predicate, timeout=60.0):
        deadline = time.monotonic() + timeout
        with self.changed:
            while not predicate():
                remaining = deadline - time.monotonic()
                assert remaining > 0, f"timed out; states {self.states}"
                self.changed.wait(remaining)

    def of(self, kind):
        return [e for e in self.entries.values() if e.kind == kind]


def settings(host: str, backend: str = "ollama") -> AppSettings:
    return AppSettings(
        speech=SpeechModelSettings(model_id="tiny", device="cpu"),
        llm=LlmSettings(backend=backend, host=host, model="standin:latest",
                        tools=("calculator",), stt_model="tiny-stt"),
    )


def test_a_session_runs_reads_typed_and_dropped_text_and_stops_cleanly(tiny_folder, data_dir):
    source = FileAudioSource(np.zeros(24000, np.float32))
    recorder = Recorder()
    with OllamaStandIn(script=[ScriptedReply(content="Canberra is the capital.")]) as standin:
        session = ConversationSession(settings(standin.url), recorder, lambda _s: source,
                                      CheckpointCache())
        session.send_text("What is the capital of Australia?")  # before it is even running
        session.start()
        recorder.wait(lambda: ("running", "Listening") in recorder.states)
        session.inject_text("Notes: the meeting is at noon.", "dropped file: notes.txt")
        recorder.wait(lambda: len([e for e in recorder.of("span") if e.final]) == 2)
        recorder.wait(lambda: recorder.of("assistant"))
        assert session.stop()
    assert recorder.states[-1][0] == "stopped"
    spans = {e.source: e for e in recorder.of("span")}
    assert spans["dropped file: notes.txt"].text == "Notes: the meeting is at noon."
    assert spans["llm"].text == "Canberra is the capital."
    assert all(e.landed_frame is not None for e in spans.values())
    assert recorder.of("user")[0].text == "What is the capital of Australia?"
    assert len(source.played) > 0  # the model's audio reached the speaker side
    assert recorder.statuses and recorder.statuses[-1].context_window == 375
    assert not session.running


def test_an_unreachable_llm_is_a_notice_and_the_conversation_goes_on(tiny_folder, data_dir):
    with OllamaStandIn() as standin:
        dead = standin.url
    source = FileAudioSource(np.zeros(2400, np.float32))
    recorder = Recorder()
    session = ConversationSession(settings(dead), recorder, lambda _s: source, CheckpointCache())
    session.start()
    recorder.wait(lambda: ("running", "Listening") in recorder.states)
    session.send_text("anyone there?")
    recorder.wait(lambda: any("could not answer" in e.text for e in recorder.of("notice")))
    frames_before = len(source.played)
    recorder.wait(lambda: len(source.played) > frames_before + 3)  # still talking
    assert session.stop()


class FailingSource(FileAudioSource):
    """A source whose device 'disappears' once: it reports through on_error like LiveAudio."""

    def __init__(self, pcm) -> None:
        super().__init__(pcm)
        self.on_error = None

    def fail(self, message: str) -> None:
        self.on_error(message)


def test_an_audio_failure_pauses_and_resume_continues_the_same_conversation(tiny_folder,
                                                                          data_dir):
    sources: list[FailingSource] = []

    def audio(_settings):
        sources.append(FailingSource(np.zeros(2400, np.float32)))
        return sources[-1]

    recorder = Recorder()
    settings = AppSettings(speech=SpeechModelSettings(model_id="tiny", device="cpu"),
                           llm=LlmSettings(backend="none"))
    session = ConversationSession(settings, recorder, audio, CheckpointCache())
    session.start()
    recorder.wait(lambda: ("running", "Listening") in recorder.states)
    sources[0].fail("device unplugged")
    recorder.wait(lambda: any(s == "paused" for s, _ in recorder.states))
    assert session.paused and session.running  # the model and its context are kept
    assert any("device unplugged" in e.text for e in recorder.of("notice"))
    session.inject_text("kept while paused", "typed")
    session.resume()
    recorder.wait(lambda: recorder.states[-1] == ("running", "Listening"))
    assert len(sources) == 2  # the devices were opened again
    recorder.wait(lambda: any(e.source == "typed" and e.final for e in recorder.of("span")))
    assert session.stop()
