"""A device that disappears mid-conversation pauses its audio with a message, text goes on
(silence stands in for the microphone), and Resume opens the devices again.

The virtual sound card's null sink is unloaded while a live session runs (real PortAudio
streams), then loaded again."""

from __future__ import annotations

import subprocess

from app.audio.live_audio import LiveAudio
from app.bench.audio_bench import NULL_SINK
from app.conversation.session import CheckpointCache, ConversationSession
from app.settings.schema import AppSettings, LlmSettings, SpeechModelSettings
from tests.conversation.recorder import Recorder
from tests.waiting import wait_until


def _pactl(*args: str) -> str:
    return subprocess.run(["pactl", *args], check=True, capture_output=True, text=True,
                          timeout=10).stdout


def _unload_null_sinks() -> None:
    for line in _pactl("list", "short", "modules").splitlines():
        if "module-null-sink" in line and f"sink_name={NULL_SINK}" in line:
            _pactl("unload-module", line.split()[0])


def _load_null_sink() -> None:
    _pactl("load-module", "module-null-sink", f"sink_name={NULL_SINK}", "rate=24000",
           "channels=1")
    _pactl("set-default-sink", NULL_SINK)
    _pactl("set-default-source", f"{NULL_SINK}.monitor")


def test_unplugging_pauses_the_conversation_and_resume_continues(null_sink, tiny_folder,
                                                                 data_dir):
    opened: list[LiveAudio] = []

    def audio(settings):
        opened.append(LiveAudio(echo_mode="headset"))
        return opened[-1]

    recorder = Recorder()
    settings = AppSettings(speech=SpeechModelSettings(model_id="tiny", device="cpu"),
                           llm=LlmSettings(backend="none"))
    session = ConversationSession(settings, recorder, audio, CheckpointCache())
    session.start()
    try:
        recorder.wait(lambda: ("running", "Listening") in recorder.states, timeout=90)
        wait_until(lambda: opened[0].counters()["frames_captured"] >= 5, 15, interval=0.05,
                   message="the first stream captured fewer than 5 frames")
        _unload_null_sinks()  # the "device" is gone
        recorder.wait(lambda: any(state == "paused" for state, _ in recorder.states))
        assert session.running and session.paused  # paused, not dead: the context is kept
        assert any("paused" in text for text in recorder.notices)
        session.inject_text("Read while the device is gone.", "pasted text")
        recorder.wait(lambda: "pasted text" in recorder.spans, timeout=30)  # text goes on
        _load_null_sink()  # plugged back in
        session.resume()
        recorder.wait(lambda: recorder.states[-1] == ("running", "Listening"))
        assert len(opened) == 2
        wait_until(lambda: opened[1].counters()["frames_captured"] >= 5, 15, interval=0.05,
                   message="the reopened stream captured fewer than 5 frames")
    finally:
        assert session.stop()
