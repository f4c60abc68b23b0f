"""The desktop app with real PortAudio streams on the virtual PulseAudio device.

A spoken question (espeak-ng) is played into the virtual microphone (a null sink whose
monitor is the default source); the app's tiny engine hears it, speech recognition and the
stand-in LLM turn it into a span, the model's audio reaches the virtual speaker (a second
null sink, recorded from its monitor), and a text typed into the box is read as a span.
"""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import sphn

from app.llm.ollama_standin import OllamaStandIn, ScriptedReply
from app.settings.schema import (
    AppSettings,
    AudioSettings,
    LlmSettings,
    SpeechModelSettings,
)
from app.ui.app import _live_audio_factory
from app.ui.conversation_controller import ConversationController
from app.ui.main_window import MainWindow

SPEAKER_SINK = "vspeaker"


@pytest.fixture()
def speaker_sink(null_sink, monkeypatch):
    """A second null sink for the app's playback, so the microphone hears only the user."""
    loaded = subprocess.run(
        ["pactl", "load-module", "module-null-sink", f"sink_name={SPEAKER_SINK}",
         "rate=24000", "channels=1"], check=True, capture_output=True, text=True, timeout=10)
    monkeypatch.setenv("PULSE_SINK", SPEAKER_SINK)  # libpulse's default sink for this process
    yield SPEAKER_SINK
    subprocess.run(["pactl", "unload-module", loaded.stdout.strip()], capture_output=True,
                   timeout=10)


@pytest.fixture(scope="module")
def spoken_question(tmp_path_factory) -> Path:
    espeak = shutil.which("espeak-ng")
    assert espeak, "espeak-ng is missing: installer/run-tests.sh installs it"
    folder = tmp_path_factory.mktemp("speech")
    raw = folder / "raw.wav"
    subprocess.run([espeak, "-v", "en-us", "-s", "150", "-w", str(raw),
                    "What is the capital of Australia?"], check=True, timeout=60)
    speech, _ = sphn.read(str(raw), sample_rate=24000)
    pcm = np.concatenate([np.asarray(speech, np.float32).mean(axis=0),
                          np.zeros(36000, np.float32)])
    path = folder / "question.wav"
    sphn.write_wav(str(path), pcm, 24000)
    return path


def test_the_app_hears_the_microphone_and_speaks_to_the_speaker(
    qtbot, speaker_sink, spoken_question, tiny_folder, data_dir, tmp_path
):
    reply = "Canberra is the capital of Australia."
    with OllamaStandIn(script=[ScriptedReply(content=reply)]) as standin:
        settings = AppSettings(
            speech=SpeechModelSettings(model_id="tiny", device="cpu"),
            audio=AudioSettings(echo_mode="headset"),
            llm=LlmSettings(backend="ollama", host=standin.url, model="standin:latest",
                            tools_enabled=False, stt_model="tiny-stt", end_of_turn="vad"),
        )
        controller = ConversationController(_live_audio_factory)
        window = MainWindow(controller, settings)
        qtbot.addWidget(window)
        window.show()
        window.start_action.trigger()
        qtbot.waitUntil(lambda: controller.state == "running", timeout=90_000)

        recording = tmp_path / "speaker.raw"
        recorder = subprocess.Popen(
            ["parec", f"--device={speaker_sink}.monitor", "--rate=24000", "--channels=1",
             "--format=s16le", "--raw", str(recording)])
        try:
            subprocess.run(["paplay", "--device=vsink", str(spoken_question)], check=True,
                           timeout=60)

            def entries(kind):
                return [e for e in window.transcript.entries() if e.kind == kind]

            # The microphone reached speech recognition, the end of turn reached the LLM,
            # and the answer was injected.
            qtbot.waitUntil(lambda: any(e.final for e in entries("user")), timeout=30_000)
            qtbot.waitUntil(lambda: any(e.text == reply and e.final for e in entries("span")),
                            timeout=30_000)
            window.input_box.editor.setPlainText("Remember: I prefer metric units.")
            window.input_box.read_button.click()
            qtbot.waitUntil(lambda: any(e.source == "pasted text" and e.final
                                        for e in entries("span")), timeout=30_000)
            assert entries("assistant")
        finally:
            recorder.terminate()
            recorder.wait(10)
            window.close()
    assert not controller.running
    heard = np.frombuffer(recording.read_bytes(), dtype=np.int16).astype(np.float32) / 32768
    assert heard.size > 24000  # over a second of the app's playback was recorded
    assert np.sqrt(np.mean(heard**2)) > 1e-3  # and it is not silence: the model's voice
