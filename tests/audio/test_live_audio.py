"""LiveAudio on the real null sink: what is played comes back through the monitor."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from app.audio.live_audio import LiveAudio
from app.frames import FRAME_SAMPLES, SAMPLE_RATE

pytestmark = pytest.mark.usefixtures("null_sink")

TONE_HZ = 440.0


class _Loop:
    """on_frame that keeps the frames and answers each with one frame of a 440 Hz tone."""

    def __init__(self) -> None:
        self.frames: list[np.ndarray] = []
        self.audio: LiveAudio | None = None
        self.cond = threading.Condition()
        self._n = 0

    def __call__(self, frame: np.ndarray) -> bool:
        t = (np.arange(FRAME_SAMPLES) + self._n * FRAME_SAMPLES) / SAMPLE_RATE
        self._n += 1
        assert self.audio is not None
        self.audio.play((0.3 * np.sin(2 * np.pi * TONE_HZ * t)).astype(np.float32))
        with self.cond:
            self.frames.append(frame)
            self.cond.notify_all()
        return True

    def wait_for(self, count: int, timeout: float = 10.0) -> None:
        with self.cond:
            assert self.cond.wait_for(lambda: len(self.frames) >= count, timeout), (
                f"only {len(self.frames)} frames arrived")


def _peak_hz(frames: list[np.ndarray]) -> float:
    x = np.concatenate(frames)  # [n]
    spectrum = np.abs(np.fft.rfft(x * np.hanning(x.shape[0])))
    return float(np.argmax(spectrum)) * SAMPLE_RATE / x.shape[0]


def _run(echo_mode: str = "headset", **kwargs) -> tuple[LiveAudio, _Loop, list[str]]:
    loop, errors = _Loop(), []
    audio = LiveAudio(loop, errors.append, echo_mode=echo_mode, **kwargs)
    loop.audio = audio
    assert audio.start(), errors
    return audio, loop, errors


def test_frames_arrive_a_tone_comes_back_and_a_restart_works() -> None:
    audio, loop, errors = _run()
    try:
        loop.wait_for(40)  # ~2 s of PulseAudio prebuffering, then real time
        assert {f.shape for f in loop.frames} == {(FRAME_SAMPLES,)}
        assert {f.dtype for f in loop.frames} == {np.dtype(np.float32)}
        assert abs(_peak_hz(loop.frames[-10:]) - TONE_HZ) < 5.0
        assert audio.mic_level_db > -20.0 and audio.speaker_level_db > -20.0
        assert audio.counters()["frames_captured"] >= 40 and audio.counters()["dropped"] == 0
        assert audio.levels() == (audio.mic_level_db, audio.speaker_level_db)
    finally:
        assert audio.stop(timeout=5.0)
    assert audio.stop(timeout=5.0)  # idempotent
    assert not audio.running
    loop.frames.clear()
    assert audio.start(), errors
    try:
        loop.wait_for(5)
    finally:
        assert audio.stop(timeout=5.0)
    assert errors == []


def test_the_resampling_path_keeps_the_pitch() -> None:
    audio, loop, errors = _run(device_rate=48000)
    try:
        assert audio.input_rate == audio.output_rate == 48000
        loop.wait_for(40)
        assert {f.shape for f in loop.frames} == {(FRAME_SAMPLES,)}
        assert abs(_peak_hz(loop.frames[-10:]) - TONE_HZ) < 5.0
    finally:
        assert audio.stop(timeout=5.0)
    assert errors == []


def test_headset_passes_audio_unchanged_and_cancel_removes_the_echo() -> None:
    seen: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {"headset": [], "cancel": []}
    for mode in ("headset", "cancel"):
        audio, loop, errors = _run(
            mode, frame_tap=lambda raw, _far, sent, m=mode: seen[m].append((raw.copy(),
                                                                            sent.copy())))
        try:
            loop.wait_for(60 if mode == "cancel" else 30)  # converges within ~2 s of echo
        finally:
            assert audio.stop(timeout=5.0)
        assert errors == []
    assert all(np.array_equal(raw, sent) for raw, sent in seen["headset"])
    raw = np.concatenate([r for r, _ in seen["cancel"][-15:]])
    sent = np.concatenate([s for _, s in seen["cancel"][-15:]])
    assert 10 * np.log10(np.mean(raw**2) / (np.mean(sent**2) + 1e-20)) > 20.0


def test_muted_mic_sends_silence_but_keeps_the_level() -> None:
    audio, loop, errors = _run()
    audio.muted = True
    try:
        loop.wait_for(40)
        assert not np.concatenate(loop.frames).any()
        assert audio.mic_level_db > -20.0
    finally:
        audio.stop(timeout=5.0)


def test_a_device_that_cannot_open_reports_instead_of_raising() -> None:
    errors: list[str] = []
    audio = LiveAudio(lambda f: True, errors.append, device_rate=-1)
    assert audio.start() is False
    assert len(errors) == 1 and "could not open" in errors[0]
    assert audio.stop(timeout=2.0) and not audio.running
