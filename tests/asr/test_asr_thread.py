"""The ASR thread on the tiny STT: events, end of turn by the STT's head, clean endings."""

from __future__ import annotations

import queue

import numpy as np
import pytest

from app.asr.asr_thread import AsrOptions, StreamingAsr
from app.asr.events import AsrError, AsrFinal, AsrPartial, AsrWord


def _drain(events: queue.SimpleQueue) -> list:
    out = []
    while True:
        try:
            out.append(events.get_nowait())
        except queue.Empty:
            return out


def _feed_noise(asr: StreamingAsr, count: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(count):
        assert asr.push_frame((0.1 * rng.standard_normal(1920)).astype(np.float32), timeout=10)


def test_words_and_partials_stream_and_the_thread_ends_cleanly(tiny_stt):
    # A threshold the random head never reaches: no end of turn, only words.
    asr = StreamingAsr(tiny_stt, AsrOptions(eos_threshold=1.01))
    assert asr.end_of_turn_by == "stt"
    asr.start()
    _feed_noise(asr, 30)
    asr.finish_input()
    assert asr.join(120), "the ASR thread did not end after finish_input"
    events = _drain(asr.events)
    assert not [e for e in events if isinstance(e, AsrError)], events
    words = [e for e in events if isinstance(e, AsrWord)]
    partials = [e for e in events if isinstance(e, AsrPartial)]
    assert words and len(partials) == len(words)
    starts = [w.start_s for w in words]
    assert starts == sorted(starts)
    assert all(w.start_s <= w.end_s for w in words)
    assert partials[-1].text == " ".join(w.text for w in words)
    assert all(len(a.text) < len(b.text) for a, b in zip(partials, partials[1:], strict=False))
    assert not [e for e in events if isinstance(e, AsrFinal)]
    assert asr.frames_done == 30 and asr.dropped_frames == 0


def test_the_stt_head_ends_the_turn(tiny_stt):
    # Threshold 0: the first frame after a word ends the turn (plumbing, random weights).
    asr = StreamingAsr(tiny_stt, AsrOptions(eos_threshold=0.0))
    asr.start()
    _feed_noise(asr, 20, seed=3)
    asr.finish_input()
    assert asr.join(120)
    events = _drain(asr.events)
    finals = [e for e in events if isinstance(e, AsrFinal)]
    assert finals and all(f.detected_by == "stt" for f in finals)
    for final in finals:
        assert final.text and final.start_s <= final.end_s
        assert 0.0 < final.detected_at_s <= 20 * 0.08 + 1e-9
    # Every word belongs to exactly one final or to the still-open utterance.
    words = [e.text for e in events if isinstance(e, AsrWord)]
    in_finals = " ".join(f.text for f in finals).split()
    assert words[: len(in_finals)] == in_finals


def test_a_full_queue_drops_and_counts(tiny_stt):
    asr = StreamingAsr(tiny_stt, AsrOptions(input_queue_frames=2))  # not started
    frame = np.zeros(1920, dtype=np.float32)
    assert asr.push_frame(frame) and asr.push_frame(frame)
    assert not asr.push_frame(frame)
    assert asr.dropped_frames == 1
    with pytest.raises(ValueError, match="1920"):
        asr.push_frame(np.zeros(960, dtype=np.float32))


def test_stop_ends_a_waiting_thread(tiny_stt):
    asr = StreamingAsr(tiny_stt)
    asr.start()
    assert asr.ready.wait(120)
    assert asr.stop(10)
    assert not asr.running


def test_a_failure_becomes_a_fatal_error_event(tiny_stt, monkeypatch):
    from app.asr import kyutai_stt

    def broken(self, rows, pcm):
        raise RuntimeError("mimi exploded")

    monkeypatch.setattr(kyutai_stt.SttRows, "step", broken)
    asr = StreamingAsr(tiny_stt)
    asr.start()
    _feed_noise(asr, 1)
    assert asr.join(120), "a failing ASR thread must end"
    errors = [e for e in _drain(asr.events) if isinstance(e, AsrError)]
    assert len(errors) == 1 and errors[0].fatal and "mimi exploded" in errors[0].message


def _heard(tiny_stt, audio: np.ndarray, vad: bool) -> list:
    from tests.asr.conftest import frames

    asr = StreamingAsr(tiny_stt, AsrOptions(force_vad=vad, input_queue_frames=400))
    asr.start()
    for pcm in frames(audio):
        assert asr.push_frame(pcm, timeout=60)
    asr.finish_input()
    assert asr.join(300)
    return _drain(asr.events)


def test_partials_say_whether_the_vad_heard_the_user(tiny_stt, spoken_question):
    """The tiny recogniser (random weights) makes words of silence: with the VAD on, those
    partials say nobody spoke; the partials of the question's utterance say the user did,
    and the next utterance starts unvoiced again. Without the VAD they say nothing."""
    silence = np.zeros(24000 * 3, np.float32)
    quiet = [e for e in _heard(tiny_stt, silence, vad=True) if isinstance(e, AsrPartial)]
    assert quiet and all(p.voiced is False for p in quiet)

    events = _heard(tiny_stt, np.concatenate([silence, spoken_question, silence]), vad=True)
    final = next(i for i, e in enumerate(events) if isinstance(e, AsrFinal))
    before = [e for e in events[:final] if isinstance(e, AsrPartial)]
    after = [e for e in events[final:] if isinstance(e, AsrPartial)]
    assert before[0].voiced is False  # the silence before the question
    assert before[-1].voiced is True  # the question's words, the VAD hearing it
    assert after and all(p.voiced is False for p in after)  # silence again

    unknown = [e for e in _heard(tiny_stt, silence, vad=False) if isinstance(e, AsrPartial)]
    assert unknown and all(p.voiced is None for p in unknown)
