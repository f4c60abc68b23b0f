"""End of turn by Silero VAD, on real speech (espeak-ng), silence and noise."""

from __future__ import annotations

import queue

import numpy as np
import pytest

from app.asr.asr_thread import AsrOptions, StreamingAsr
from app.asr.events import AsrError, AsrFinal
from app.asr.vad import (
    SileroTurnDetector,
    SpeechEnded,
    SpeechStarted,
    VadOptions,
    load_silero_model,
)

RATE = 24000
LEAD_S, TAIL_S = 1.0, 1.5
TOLERANCE_S = 0.2


def _drain(asr: StreamingAsr) -> list:
    events = []
    while True:
        try:
            events.append(asr.events.get_nowait())
        except queue.Empty:
            return events


def _frames(audio: np.ndarray) -> list[np.ndarray]:
    audio = np.pad(audio.astype(np.float32), (0, -len(audio) % 1920))
    return [audio[i : i + 1920] for i in range(0, len(audio), 1920)]


@pytest.fixture(scope="module")
def silero():
    return load_silero_model()


@pytest.fixture(scope="module")
def placed_speech(spoken_question: np.ndarray) -> tuple[np.ndarray, float, float]:
    """The question after 1 s of silence and before 1.5 s; true start and end in seconds."""
    loud = np.flatnonzero(np.abs(spoken_question) > 0.02)
    start = LEAD_S + loud[0] / RATE
    end = LEAD_S + loud[-1] / RATE
    audio = np.concatenate(
        [np.zeros(int(LEAD_S * RATE)), spoken_question, np.zeros(int(TAIL_S * RATE))]
    )
    return audio.astype(np.float32), start, end


def _run_detector(detector: SileroTurnDetector, audio: np.ndarray) -> list:
    events = []
    for frame in _frames(audio):
        events.extend(detector.push(frame))
    return events


def test_speech_boundaries_are_found(silero, placed_speech):
    audio, true_start, true_end = placed_speech
    options = VadOptions(hang_s=0.6)
    events = _run_detector(SileroTurnDetector(options, model=silero), audio)
    assert [type(e) for e in events] == [SpeechStarted, SpeechEnded], events
    started, ended = events
    assert abs(started.start_s - true_start) <= TOLERANCE_S, (started, true_start)
    assert abs(ended.start_s - true_start) <= TOLERANCE_S
    assert abs(ended.end_s - true_end) <= TOLERANCE_S, (ended, true_end)
    assert ended.decided_at_s >= ended.end_s + options.hang_s - 1e-6
    assert ended.decided_at_s <= ended.end_s + options.hang_s + 0.1


def test_loading_silero_keeps_torch_threads():
    """Importing silero_vad sets one thread; the count before it is put back. The tests run
    torch on one thread (tests/conftest.py), so this test asks for two first."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        load_silero_model()
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_silence_gives_no_utterance(silero):
    events = _run_detector(SileroTurnDetector(model=silero), np.zeros(3 * RATE))
    assert events == []


def test_noise_only_does_not_crash(silero):
    rng = np.random.default_rng(7)
    detector = SileroTurnDetector(model=silero)
    events = _run_detector(detector, (0.3 * rng.standard_normal(3 * RATE)).astype(np.float32))
    assert all(isinstance(e, SpeechStarted | SpeechEnded) for e in events)
    assert 0.0 <= detector.last_prob <= 1.0


def test_short_bursts_are_not_speech(silero, placed_speech):
    audio, true_start, _ = placed_speech
    burst = audio[: int((true_start + 0.15) * RATE)]  # 150 ms of the question
    padded = np.concatenate([burst, np.zeros(2 * RATE, dtype=np.float32)])
    events = _run_detector(SileroTurnDetector(VadOptions(min_speech_s=0.4), model=silero), padded)
    assert events == []


def test_resampler_streams_like_one_shot():
    from app.audio.resampler import StreamingResampler

    t = np.arange(RATE) / RATE
    tone = (0.5 * np.sin(2 * np.pi * 1000.0 * t)).astype(np.float32)
    resample = StreamingResampler(24000, 16000)
    streamed = np.concatenate([resample(frame) for frame in _frames(tone)] + [resample.flush()])
    one_shot = StreamingResampler(24000, 16000)
    padded = np.concatenate(_frames(tone))
    whole = np.concatenate([one_shot(padded), one_shot.flush()])
    assert len(streamed) == len(whole) == 16000 * len(_frames(tone)) * 1920 // RATE
    np.testing.assert_allclose(streamed, whole, atol=1e-4)
    spectrum = np.abs(np.fft.rfft(streamed[1000:13000]))
    peak_hz = np.argmax(spectrum) * 16000 / 12000
    assert abs(peak_hz - 1000.0) < 5.0
    impulse = np.zeros(RATE, np.float32)
    impulse[12000] = 0.9
    out = StreamingResampler(24000, 16000)
    moved = np.concatenate([out(f) for f in _frames(impulse)] + [out.flush()])
    assert int(np.argmax(np.abs(moved))) == 8000  # positions are not shifted


def test_the_thread_ends_the_turn_by_vad(tiny_stt, placed_speech):
    audio, true_start, true_end = placed_speech
    options = AsrOptions(force_vad=True, vad=VadOptions(hang_s=0.6))
    asr = StreamingAsr(tiny_stt, options)
    assert asr.end_of_turn_by == "vad"
    asr.start()
    for frame in _frames(audio):
        assert asr.push_frame(frame, timeout=10)
    asr.finish_input()
    assert asr.join(120)
    events = _drain(asr)
    assert not [e for e in events if isinstance(e, AsrError)], events
    finals = [e for e in events if isinstance(e, AsrFinal)]
    assert len(finals) == 1, finals
    final = finals[0]
    assert final.detected_by == "vad"
    assert abs(final.detected_at_s - (true_end + 0.6)) <= TOLERANCE_S + 0.1
    assert final.missed_frames == 0


def test_frames_the_recognizer_never_got_are_reported_with_the_turn(tiny_stt, placed_speech):
    """A full queue (the computer too busy) drops frames: the turn that lost them says how
    many, so the user can be told that words may be missing."""
    audio, _, _ = placed_speech
    frames = _frames(audio)
    queued = int((LEAD_S + 0.5) * RATE) // 1920  # the lead silence and half a second of speech
    asr = StreamingAsr(tiny_stt, AsrOptions(force_vad=True, vad=VadOptions(hang_s=0.6),
                                            input_queue_frames=queued))
    for frame in frames[:queued]:  # not started yet: the queue fills
        assert asr.push_frame(frame, timeout=0)
    for frame in frames[queued : queued + 3]:
        assert not asr.push_frame(frame, timeout=0)  # live audio never waits: dropped
    asr.start()
    for frame in frames[queued + 3 :]:
        assert asr.push_frame(frame, timeout=10)
    asr.finish_input()
    assert asr.join(120)
    events = _drain(asr)
    finals = [e for e in events if isinstance(e, AsrFinal)]
    assert asr.dropped_frames == 3
    assert [f.missed_frames for f in finals] == [3]


def test_the_thread_on_silence_ends_no_turn(tiny_stt):
    asr = StreamingAsr(tiny_stt, AsrOptions(force_vad=True))
    asr.start()
    for frame in _frames(np.zeros(2 * RATE, dtype=np.float32)):
        assert asr.push_frame(frame, timeout=10)
    asr.finish_input()
    assert asr.join(120)
    events = _drain(asr)
    assert not [e for e in events if isinstance(e, AsrFinal | AsrError)], events
