"""A live session without Qt: the tiny model, a file as the microphone, the stand-in LLM."""

from __future__ import annotations

import time

import numpy as np

from app.audio.file_source import FileAudioSource
from app.conversation.session import CheckpointCache, ConversationSession
from app.llm.ollama_standin import OllamaStandIn, ScriptedReply
from app.settings.schema import AppSettings, LlmSettings, SpeechModelSettings
from tests.conversation.recorder import Recorder
from tests.waiting import wait_until


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
    assert spans["standin:latest on Ollama"].text == "Canberra is the capital."  # named
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


# ---- issue 10: text without audio devices, settings applied live, Stop with a hung LLM -------


class NoDevices:
    """What LiveAudio does on a machine without sound devices: start() reports through
    on_error and returns False, and so do its one-stream copies (`only`)."""

    opened = 0

    def __init__(self) -> None:
        self.muted = False
        self.on_error = None

    def start(self, on_frame):
        NoDevices.opened += 1
        if self.on_error is not None:
            self.on_error("could not open the audio devices: no microphone was found")
        return False

    def only(self, _kind):
        return NoDevices()

    def play(self, frame):
        raise AssertionError("nothing can play without a device")

    def levels(self):
        return -100.0, -100.0

    def counters(self):
        return {}

    def stop(self, timeout=5.0):
        return True


def test_typed_questions_are_answered_without_any_audio_device(tiny_folder, data_dir):
    recorder = Recorder()
    with OllamaStandIn(script=[ScriptedReply(content="Canberra.")]) as standin:
        session = ConversationSession(settings(standin.url), recorder, lambda _s: NoDevices(),
                                      CheckpointCache())
        session.start()
        try:
            recorder.wait(lambda: any(s == "paused" for s, _ in recorder.states), timeout=90)
            assert session.running and session.paused  # Resume is offered
            session.send_text("What is the capital of Australia?")
            session.inject_text("The meeting is at noon.", "pasted text")
            recorder.wait(lambda: {e.source for e in recorder.of("span") if e.final}
                          >= {"standin:latest on Ollama", "pasted text"}, timeout=30)
            recorder.wait(lambda: recorder.of("assistant"), timeout=30)  # words still shown
        finally:
            assert session.stop()
    notices = [e.text for e in recorder.of("notice") if "No microphone" in e.text]
    assert len(notices) == 1, notices  # said once
    assert "Resume" in notices[0] and "Settings" in notices[0]
    assert recorder.states[-1][0] == "stopped"


def test_settings_changed_live_reach_the_next_llm_request(tiny_folder, data_dir):
    from dataclasses import replace

    recorder = Recorder()
    source = FileAudioSource(np.zeros(2400, np.float32))
    with OllamaStandIn(script=[ScriptedReply(content="From A.")], models=("a:1",)) as first, \
            OllamaStandIn(script=[ScriptedReply(content="From B.")], models=("b:2",)) as second:
        before = AppSettings(
            speech=SpeechModelSettings(model_id="tiny", device="cpu"),
            llm=LlmSettings(backend="ollama", host=first.url, model="a:1", tools_enabled=False,
                            stt_model="none"))
        session = ConversationSession(before, recorder, lambda _s: source, CheckpointCache())
        session.start()
        try:
            recorder.wait(lambda: ("running", "Listening") in recorder.states, timeout=90)
            session.send_text("first?")
            recorder.wait(lambda: any(e.source == "a:1 on Ollama" and e.final
                                      for e in recorder.of("span")), timeout=30)
            after = replace(before, llm=replace(before.llm, host=second.url, model="b:2",
                                                tools_enabled=True, tools=("calculator",)),
                            audio=replace(before.audio, level_voice=False))
            assert session.apply_settings(after) == ()  # all of it applies now
            after_restart = replace(after, speech=replace(after.speech, user_name="Ana"))
            assert session.apply_settings(after_restart) == ("your name",)
            session.send_text("second?")
            recorder.wait(lambda: any(e.text == "From B." for e in recorder.of("span")),
                          timeout=30)
            assert [e.source for e in recorder.of("span") if e.text == "From B."] == [
                "b:2 on Ollama"]  # the span names the LLM the live change picked
        finally:
            assert session.stop()
    assert len(first.requests) == 1 and len(second.requests) == 1
    assert second.requests[0]["model"] == "b:2"
    assert [t["function"]["name"] for t in second.requests[0]["tools"]] == ["calculator"]
    assert session.settings == after_restart


def test_stop_returns_at_once_with_a_hung_llm_request(tiny_folder, data_dir):
    source = FileAudioSource(np.zeros(2400, np.float32))
    recorder = Recorder()
    hang = ScriptedReply(content="too late", first_token_delay_s=60.0)
    with OllamaStandIn(script=[hang]) as standin:
        session = ConversationSession(settings(standin.url), recorder, lambda _s: source,
                                      CheckpointCache())
        session.start()
        recorder.wait(lambda: ("running", "Listening") in recorder.states, timeout=90)
        session.send_text("anyone there?")
        wait_until(lambda: standin.requests, 30, message="the question never reached the LLM")
        began = time.monotonic()
        assert session.stop(15.0)
        took = time.monotonic() - began
        wait_until(lambda: standin.hangups, 5,
                   message=f"no hang-up seen (Stop took {took * 1000:.0f} ms)")
        hung_up = standin.hangups[0] - began if standin.hangups else None
    print(f"\nStop with a hung LLM request: {took * 1000:.0f} ms; the stand-in saw the "
          f"connection closed {hung_up * 1000:.0f} ms after Stop" if hung_up is not None
          else f"\nStop took {took * 1000:.0f} ms; no hang-up seen")
    assert hung_up is not None and hung_up < 2.0
    assert took < 5.0  # issue: within 1 s; asserted loosely (a loaded 2-core machine)


def test_a_missing_speech_model_is_a_state_for_the_app_not_a_traceback(data_dir, caplog):
    recorder = Recorder()
    missing = AppSettings(speech=SpeechModelSettings(model_id="moshika", device="cpu"),
                          llm=LlmSettings(backend="none"))
    session = ConversationSession(missing, recorder, lambda _s: NoDevices(), CheckpointCache())
    session.start()
    recorder.wait(lambda: recorder.states and recorder.states[-1][0] in (
        "model_missing", "error", "stopped"), timeout=60)
    assert session.join(10.0)
    state, detail = recorder.states[-1]
    assert state == "model_missing", recorder.states
    assert "moshika" in detail and "CheckpointMissingError" not in detail
    assert not [r for r in caplog.records if r.levelname in ("ERROR", "CRITICAL")]


def test_what_was_typed_while_a_missing_model_loaded_is_shown_not_lost(data_dir):
    """Typed and dropped text waits for the model; when it never comes up, both are still
    in the transcript, with why."""
    recorder = Recorder()
    missing = AppSettings(speech=SpeechModelSettings(model_id="moshika", device="cpu"),
                          llm=LlmSettings(backend="none"))
    session = ConversationSession(missing, recorder, lambda _s: NoDevices(), CheckpointCache())
    session.send_text("what is the capital of australia?")
    session.inject_text("Canberra is the capital.", "pasted text")
    session.start()
    recorder.wait(lambda: recorder.states and recorder.states[-1][0] == "model_missing",
                  timeout=60)
    assert session.join(10.0)
    entries = list(recorder.entries.values())
    assert [e.text for e in entries if e.kind == "user"] == ["what is the capital of australia?"]
    span, = [e for e in entries if e.kind == "span"]
    assert span.text == "Canberra is the capital." and "not injected" in span.detail
    assert any(e.kind == "notice" and "was not sent" in e.text for e in entries)


def test_turning_the_llm_on_during_a_conversation(tiny_folder, data_dir):
    from dataclasses import replace

    recorder = Recorder()
    source = FileAudioSource(np.zeros(2400, np.float32))
    off = AppSettings(speech=SpeechModelSettings(model_id="tiny", device="cpu"),
                      llm=LlmSettings(backend="none", tools_enabled=False, stt_model="none"))
    with OllamaStandIn(script=[ScriptedReply(content="Now I answer.")]) as standin:
        session = ConversationSession(off, recorder, lambda _s: source, CheckpointCache())
        session.start()
        try:
            recorder.wait(lambda: ("running", "Listening") in recorder.states, timeout=90)
            session.send_text("hello?")
            recorder.wait(lambda: any("No LLM backend" in e.text for e in recorder.of("notice")))
            on = replace(off, llm=replace(off.llm, backend="ollama", host=standin.url,
                                          model="standin:latest"))
            assert session.apply_settings(on) == ()
            session.send_text("and now?")
            recorder.wait(lambda: any(e.text == "Now I answer." for e in recorder.of("span")),
                          timeout=30)
            # Speech recognition comes with the LLM side: only a restart brings it.
            assert session.apply_settings(replace(on, llm=replace(
                on.llm, stt_model="tiny-stt"))) == ("speech recognition",)
        finally:
            assert session.stop()
    assert standin.requests[0]["messages"][-1]["content"] == "and now?"


def test_what_is_sent_before_the_engine_is_up_is_shown_and_handled_in_order(tiny_folder,
                                                                            data_dir):
    source = FileAudioSource(np.zeros(2400, np.float32))
    recorder = Recorder()
    with OllamaStandIn(script=[ScriptedReply(content="One."),
                               ScriptedReply(content="Two.")]) as standin:
        early = AppSettings(speech=SpeechModelSettings(model_id="tiny", device="cpu"),
                            llm=LlmSettings(backend="ollama", host=standin.url,
                                            model="standin:latest", tools_enabled=False,
                                            stt_model="none"))
        session = ConversationSession(early, recorder, lambda _s: source, CheckpointCache())
        session.send_text("first?")
        session.inject_text("Notes read early.", "pasted text")
        session.send_text("second?")
        session.start()
        try:
            recorder.wait(lambda: any(e.source == "pasted text" and e.final
                                      for e in recorder.of("span")), timeout=180)
            recorder.wait(lambda: any(e.text in ("One.", "Two.") for e in recorder.of("span")),
                          timeout=30)
        finally:
            assert session.stop()
    typed = sorted(recorder.of("user"), key=lambda e: e.entry_id)
    assert [e.text for e in typed] == ["first?", "second?"]  # shown, in the order typed
    assert standin.requests[-1]["messages"][-1]["content"] == "second?"  # asked last


def test_an_engine_failure_mid_conversation_says_why(tiny_folder, data_dir, monkeypatch):
    """Issue 33: the engine's step runs out of memory mid-conversation. The window's state
    says why (the exception's type and message, not "stopped after an error") and the
    transcript shows the error."""
    import torch

    from app.engine.torch_runtime import TorchRuntime

    step = TorchRuntime.step
    calls = {"n": 0}

    def failing_step(self, rows, columns):
        calls["n"] += 1
        if calls["n"] > 30:  # the warm-up's and the first frames' steps pass
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 3.00 GiB")
        return step(self, rows, columns)

    monkeypatch.setattr(TorchRuntime, "step", failing_step)
    recorder = Recorder()
    source = FileAudioSource(np.zeros(24000 * 20, np.float32))
    plain = AppSettings(speech=SpeechModelSettings(model_id="tiny", device="cpu"),
                        llm=LlmSettings(backend="none"))
    session = ConversationSession(plain, recorder, lambda _s: source, CheckpointCache())
    session.start()
    recorder.wait(lambda: recorder.states and recorder.states[-1][0] == "error", timeout=120)
    assert session.join(30.0)
    state, detail = recorder.states[-1]
    assert state == "error"
    assert detail == ("The speech engine stopped: the speech engine failed: OutOfMemoryError: "
                      "CUDA out of memory. Tried to allocate 3.00 GiB")
    errors = [e for e in recorder.of("notice") if "out of memory" in e.text]
    assert errors
