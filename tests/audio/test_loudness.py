"""The leveller's BS.1770 meter on numpy (app/audio/loudness.py) reads what pyloudnorm reads
(its K-weighting, blocks and gates), so the thin client lost scipy and not its meter.
pyloudnorm is the dev install's reference only."""

from __future__ import annotations

import numpy as np
import pytest

from app.audio.loudness import integrated_loudness, normalized
from app.audio.user_leveller import _speech_like
from app.frames import SAMPLE_RATE

pyloudnorm = pytest.importorskip("pyloudnorm")


@pytest.mark.parametrize("gain_db", [-50.0, -30.0, -10.0, 0.0, 6.0])
@pytest.mark.parametrize("seconds", [0.4, 1.37, 3.0])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_meter_equals_pyloudnorm(gain_db: float, seconds: float, dtype: type) -> None:
    audio = (_speech_like(seconds, seed=int(seconds * 10)) * 10 ** (gain_db / 20)).astype(dtype)
    theirs = pyloudnorm.Meter(SAMPLE_RATE).integrated_loudness(audio)
    ours = integrated_loudness(audio, SAMPLE_RATE)
    if np.isinf(theirs):
        assert ours == theirs
    else:
        assert abs(ours - theirs) < 1e-5, (ours, theirs)


@pytest.mark.parametrize("rate", [16000, 44100, 48000])
def test_the_meter_equals_pyloudnorm_at_other_rates(rate: int) -> None:
    rng = np.random.default_rng(rate)
    t = np.arange(2 * rate) / rate
    audio = 0.1 * np.sin(2 * np.pi * 60 * t) + 0.05 * rng.standard_normal(t.shape[0])
    audio[rate // 2:rate] = 0.0  # a pause: the gates leave it out
    theirs = pyloudnorm.Meter(rate).integrated_loudness(audio)
    assert abs(integrated_loudness(audio, rate) - theirs) < 1e-5


def test_silence_is_minus_infinity_and_too_little_audio_is_refused() -> None:
    assert integrated_loudness(np.zeros(SAMPLE_RATE, np.float32), SAMPLE_RATE) == float("-inf")
    with pytest.raises(ValueError):
        integrated_loudness(np.zeros(SAMPLE_RATE // 4, np.float32), SAMPLE_RATE)


def test_normalized_equals_pyloudnorm() -> None:
    audio = _speech_like(2.0)
    measured = integrated_loudness(audio, SAMPLE_RATE)
    theirs = pyloudnorm.normalize.loudness(audio, measured, -24.0)
    np.testing.assert_allclose(normalized(audio, measured, -24.0), theirs, rtol=1e-12)
    assert abs(integrated_loudness(normalized(audio, measured, -24.0), SAMPLE_RATE)
               + 24.0) < 1e-6
