"""The leveller's noise gate on numpy (app/audio/spectral_gate.py) computes what noisereduce's
stationary gate computes, sample for sample, so the thin client lost scipy and matplotlib
and not a bit of its gate. noisereduce is the dev install's reference only."""

from __future__ import annotations

import numpy as np
import pytest

from app.audio.spectral_gate import stationary_gate
from app.audio.user_leveller import _gate_padding, _speech_like
from app.frames import SAMPLE_RATE

noisereduce = pytest.importorskip("noisereduce")


def _noisy_speech(seconds: float, seed: int, noise: float) -> np.ndarray:
    rng = np.random.default_rng(seed)
    speech = _speech_like(seconds, seed)
    return (speech + noise * rng.standard_normal(speech.shape[0])).astype(np.float32)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("prop_decrease", [0.8, 1.0])
@pytest.mark.parametrize("padding", [_gate_padding(1024), 30000])
def test_the_gate_equals_noisereduce(seed: int, prop_decrease: float, padding: int) -> None:
    window = _noisy_speech(1.0, seed, noise=0.01 * (seed + 1))
    theirs = noisereduce.reduce_noise(y=window, sr=SAMPLE_RATE, stationary=True,
                                      prop_decrease=prop_decrease, n_fft=1024,
                                      padding=padding)
    ours = stationary_gate(window, SAMPLE_RATE, prop_decrease, 1024, padding)
    assert ours.dtype == theirs.dtype == np.float32
    np.testing.assert_array_equal(ours, theirs)


def test_the_gate_equals_noisereduce_on_float64_and_other_sizes() -> None:
    window = _noisy_speech(0.6, 5, noise=0.02).astype(np.float64)
    for n_fft in (512, 2048):
        theirs = noisereduce.reduce_noise(y=window, sr=SAMPLE_RATE, stationary=True,
                                          prop_decrease=0.5, n_fft=n_fft, padding=4000)
        ours = stationary_gate(window, SAMPLE_RATE, 0.5, n_fft, 4000)
        np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-12)


def test_the_gate_pushes_a_steady_hiss_down() -> None:
    rng = np.random.default_rng(3)
    hiss = (0.01 * rng.standard_normal(SAMPLE_RATE)).astype(np.float32)
    gated = stationary_gate(hiss, SAMPLE_RATE, 0.8, 1024, _gate_padding(1024))
    middle = slice(SAMPLE_RATE // 4, 3 * SAMPLE_RATE // 4)
    ratio_db = 10 * np.log10(np.mean(gated[middle] ** 2) / np.mean(hiss[middle] ** 2))
    assert ratio_db < -6.0
