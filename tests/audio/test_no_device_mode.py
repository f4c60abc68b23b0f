"""Audio without all of its devices (issue 10 item 4): one stream alone on the virtual
device, silence at a microphone's pace, echo cancellation switched while running, and plain
messages when a machine has no device of a kind (no "Error querying device -1")."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from app.audio import live_audio, test_tone
from app.audio.devices import ResolvedDevice
from app.audio.live_audio import LiveAudio
from app.audio.silent_microphone import SilentMicrophone
from app.frames import FRAME_SAMPLES
from tests.waiting import wait_until


class Frames:
    def __init__(self) -> None:
        self.count = 0
        self.cond = threading.Condition()

    def __call__(self, frame: np.ndarray) -> bool:
        assert frame.shape == (FRAME_SAMPLES,) and not frame.any()
        with self.cond:
            self.count += 1
            self.cond.notify_all()
        return True

    def wait_for(self, count: int, timeout: float = 10.0) -> None:
        with self.cond:
            assert self.cond.wait_for(lambda: self.count >= count, timeout), self.count


def test_the_silent_microphone_keeps_a_microphones_pace() -> None:
    frames = Frames()
    microphone = SilentMicrophone()
    microphone.start(frames)
    try:
        frames.wait_for(3)
        began, first = time.monotonic(), frames.count
        frames.wait_for(first + 12, timeout=10.0)  # ~1 s of 80 ms frames
        seconds = time.monotonic() - began
    finally:
        assert microphone.stop()
    print(f"\n12 silent frames in {seconds:.2f} s")
    assert 0.5 < seconds < 3.0  # paced, not a burst (loose: a loaded machine)
    microphone.play(np.zeros(FRAME_SAMPLES, np.float32))
    assert microphone.dropped_playback == 1  # no speaker: dropped, counted


@pytest.mark.usefixtures("null_sink")
def test_a_speaker_alone_plays_while_silence_stands_in_for_the_microphone() -> None:
    errors: list[str] = []
    full = LiveAudio(None, errors.append, echo_mode="headset")
    speaker = full.only("output")
    frames = Frames()
    source = SilentMicrophone(speaker)
    assert speaker.start() and not errors
    source.start(frames)
    try:
        assert len(speaker._streams) == 1  # the output stream only
        for _ in range(30):
            source.play(np.full(FRAME_SAMPLES, 0.2, np.float32))
        frames.wait_for(10)
        wait_until(lambda: source.levels()[1] > -30.0, 10.0, interval=0.05,
                   message="the model's audio never reached the speaker")
        assert source.levels()[0] == live_audio.LEVEL_FLOOR_DB
    finally:
        assert source.stop()
    assert not errors


@pytest.mark.usefixtures("null_sink")
def test_a_microphone_alone_and_echo_cancellation_switched_on_while_running() -> None:
    frames: list[np.ndarray] = []
    microphone = LiveAudio(frames.append, echo_mode="headset").only("input")
    assert microphone.start()
    try:
        wait_until(lambda: len(frames) >= 5, 10.0, interval=0.05,
                   message=lambda: f"only {len(frames)} frames from the microphone alone")
        microphone.play(np.ones(FRAME_SAMPLES, np.float32))  # no speaker: dropped
        assert microphone.jitter.fill == 0
    finally:
        assert microphone.stop()

    both = LiveAudio(frames.append, echo_mode="headset")
    assert both.start()
    try:
        both.set_echo_mode("cancel")  # settings changed during the conversation
        count = len(frames)
        wait_until(lambda: len(frames) >= count + 5, 10.0, interval=0.05,
                   message="the frames did not go on through the canceller")
        assert both.echo_mode == "cancel" and both._canceller is not None
    finally:
        assert both.stop()


def nothing(_name, kind):
    return ResolvedDevice(None, "", f"no audio {kind} device found")


def test_no_device_of_a_kind_is_said_plainly(monkeypatch) -> None:
    monkeypatch.setattr(live_audio, "resolve_device", nothing)
    monkeypatch.setattr(test_tone, "resolve_device", nothing)
    errors: list[str] = []
    assert LiveAudio(None, errors.append).start() is False
    assert errors == ["could not open the audio devices: no microphone was found on this "
                      "computer"]
    tone = test_tone.SpeakerTest(None).start()
    assert tone.done.is_set()
    assert tone.error is not None and "no speaker was found" in tone.error
    assert "''" not in tone.error and "-1" not in tone.error
    with pytest.raises(RuntimeError, match="no microphone was found"):
        test_tone.MicLevelMeter(None)
