"""Streaming STT on the tiny checkpoint: words come out with times in user audio."""

from __future__ import annotations

import numpy as np

from app.asr.kyutai_stt import KyutaiStreamingStt
from app.frames import FRAME_S


def _noise_frames(count: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [(0.1 * rng.standard_normal(1920)).astype(np.float32) for _ in range(count)]


def test_words_have_ordered_times_within_the_audio(tiny_stt):
    stt = KyutaiStreamingStt(tiny_stt)
    stt.start()
    try:
        words = []
        for index, frame in enumerate(_noise_frames(40)):
            step = stt.step(frame)
            assert abs(step.frame_end_s - (index + 1) * FRAME_S) < 1e-9
            assert step.end_of_speech_prob is not None and 0.0 <= step.end_of_speech_prob <= 1.0
            words.extend(step.words)
        words.extend(stt.flush())
    finally:
        stt.close()
    assert words, "the tiny STT gave no words at all"
    for earlier, later in zip(words, words[1:], strict=False):
        assert earlier.start_s <= later.start_s
        assert earlier.end_s <= later.start_s + 1e-9
    for word in words:
        assert word.text.strip() == word.text and word.text
        assert 0.0 <= word.start_s <= word.end_s <= 40 * FRAME_S + 1e-9


def test_flushed_silence_takes_no_user_time(tiny_stt):
    stt = KyutaiStreamingStt(tiny_stt)
    stt.start()
    try:
        frames = _noise_frames(20, seed=1)
        for frame in frames[:10]:
            stt.step(frame)
        flushed = stt.flush()
        assert all(w.end_s <= 10 * FRAME_S + 1e-9 for w in flushed)
        after = [w for frame in frames[10:] for w in stt.step(frame).words]
    finally:
        stt.close()
    assert stt.user_time_s == 20 * FRAME_S
    assert all(w.start_s >= 10 * FRAME_S - tiny_stt.audio_delay_s - 1e-9 for w in after)


def test_inserted_frames_map_to_user_time(tiny_stt):
    stt = KyutaiStreamingStt(tiny_stt)
    stt._insertions = [(0.0, 1.0), (3.0, 0.5)]  # a 1 s silence prefix, a 0.5 s flush
    assert stt._user_time(0.4) == 0.0  # inside the prefix
    assert stt._user_time(1.5) == 0.5
    assert stt._user_time(3.2) == 2.0  # inside the flush: where it was inserted
    assert abs(stt._user_time(4.0) - 2.5) < 1e-9
