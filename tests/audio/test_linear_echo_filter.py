"""The linear echo filter before AEC3: it learns the echo path, never touches what is not
echo, and drops an estimate that has gone stale (the echo path moved)."""

from __future__ import annotations

import numpy as np

from app.audio.linear_echo_filter import LinearEchoFilter
from app.frames import SAMPLE_RATE

BLOCK = SAMPLE_RATE // 100  # 240


def _voice(seconds: float, seed: int) -> np.ndarray:
    """Noise in syllable-rate bursts with pauses: broadband like speech, repeatable. [n]"""
    n = int(seconds * SAMPLE_RATE)
    t = np.arange(n) / SAMPLE_RATE
    bursts = np.clip(np.sin(2 * np.pi * 3.0 * t), 0.0, None) ** 2
    return 0.2 * np.random.default_rng(seed).standard_normal(n) * bursts


def _delayed(x: np.ndarray, samples: int) -> np.ndarray:
    y = np.zeros_like(x)
    y[samples:] = x[:-samples]
    return y


def _run(near: np.ndarray, far: np.ndarray) -> np.ndarray:
    echo_filter = LinearEchoFilter()
    return np.concatenate([echo_filter.process_block(near[i : i + BLOCK], far[i : i + BLOCK])
                           for i in range(0, near.shape[0] - BLOCK + 1, BLOCK)])


def _db(reference: np.ndarray, out: np.ndarray) -> float:
    return 10 * np.log10(float(reference @ reference) / max(float(out @ out), 1e-20))


def test_it_learns_a_delayed_echo_and_leaves_a_silent_far_end_alone() -> None:
    far = _voice(6.0, seed=1)
    echo = 0.5 * _delayed(far, 40 * SAMPLE_RATE // 1000)
    out = _run(echo, far)
    last_second = slice(5 * SAMPLE_RATE, 6 * SAMPLE_RATE)
    assert _db(echo[last_second], out[last_second]) > 20.0
    user = _voice(2.0, seed=2)
    assert np.array_equal(_run(user, np.zeros_like(user)), user)  # nothing played: untouched


def test_an_estimate_gone_stale_is_dropped_within_300_ms() -> None:
    """The echo stops (the user switched to headphones) while the model goes on talking:
    subtracting the old estimate would put the echo back in; within 300 ms what it sends is
    no louder than the microphone."""
    far = _voice(8.0, seed=3)
    stopped_at = 5 * SAMPLE_RATE
    noise = 1e-4 * np.random.default_rng(4).standard_normal(far.shape[0])
    echo = np.where(np.arange(far.shape[0]) < stopped_at, 0.5 * _delayed(far, 960), 0.0)
    mic = echo + noise
    out = _run(mic, far)
    before = slice(stopped_at - SAMPLE_RATE, stopped_at)
    assert _db(mic[before], out[before]) > 15.0  # it had learnt the echo path
    settled = slice(stopped_at + 300 * SAMPLE_RATE // 1000, stopped_at + 3 * SAMPLE_RATE)
    assert _db(mic[settled], out[settled]) > -1.0
