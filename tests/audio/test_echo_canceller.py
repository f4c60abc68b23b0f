"""The echo canceller on frames, offline: the model's voice through a synthetic room path,
alone and with the user talking over it (double talk).

ERLE alone cannot tell cancelling from muting: a canceller that outputs silence removes all
the echo. So the user's speech must also come out of double talk, measured apart from the
echo, and the checks are themselves tested on cancellers that mute, duck or do nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest

from app.audio.echo_canceller import EchoCanceller
from app.bench.audio_bench import speech_like
from app.frames import FRAME_SAMPLES

SR = 24000
SECONDS = 10.0
ECHO_DELAY_MS = 40
TALK_S = ((5.0, 6.5), (7.5, 9.0))  # the user talks over the model here
CONVERGED_S = (3.0, 5.0)  # the model alone, after the canceller converged
AFTER_TALK_S = (9.1, SECONDS)  # the model alone again: the filter must not have diverged


def _power_db(x: np.ndarray) -> float:
    return 10 * np.log10(float(np.mean(np.square(x, dtype=np.float64))) + 1e-20)


def _span(seconds: tuple[float, float]) -> slice:
    return slice(int(seconds[0] * SR), int(seconds[1] * SR))


def _room_echo(far: np.ndarray) -> np.ndarray:
    """The far end as the mic hears it: 40 ms late through a 3-tap room response. [n]"""
    delay = ECHO_DELAY_MS * SR // 1000
    echo = np.zeros_like(far)
    echo[delay:] = 0.5 * far[:-delay]
    echo[delay + 36 :] += 0.2 * far[: -delay - 36]
    echo[delay + 90 :] -= 0.1 * far[: -delay - 90]
    return echo


def _user_voice(n: int) -> np.ndarray:
    """A voice unlike the model's (higher pitch, another syllable rate), so the two are
    uncorrelated; about as loud at the mic as the echo. [n] float32"""
    rng = np.random.default_rng(5)
    t = np.arange(n) / SR
    f0 = 210.0 + 30.0 * np.sin(2 * np.pi * 0.45 * t + 1.0)
    phase = np.cumsum(2 * np.pi * f0 / SR)
    source = sum(np.sin(k * phase + rng.uniform(0, 2 * np.pi)) / k for k in range(1, 20))
    syllables = np.clip(np.sin(2 * np.pi * 3.1 * t + 0.5), 0, None) ** 2
    voice = np.zeros(n, dtype=np.float32)
    for talk in TALK_S:
        part = _span(talk)
        voice[part] = 0.2 * (source * syllables)[part] / np.max(np.abs(source))
    return voice


def _run(canceller: EchoCanceller, near: np.ndarray, far: np.ndarray) -> np.ndarray:
    return np.concatenate([canceller.process(near[i : i + FRAME_SAMPLES],
                                             far[i : i + FRAME_SAMPLES])
                           for i in range(0, far.shape[0] - FRAME_SAMPLES + 1, FRAME_SAMPLES)])


@dataclass(frozen=True)
class DoubleTalk:
    erle_db: float  # echo removed, the model alone, converged
    erle_after_db: float  # the same after the double talk
    echo_removed_db: float  # echo removed while the user talks
    near_corr: float  # the user's speech out vs. the same speech through an idle canceller
    near_level_db: float  # the user's speech out vs. the user's speech in


def measure_double_talk(make: Callable[[], EchoCanceller]) -> DoubleTalk:
    """The scene is played twice with the user's voice in opposite polarity: half the
    difference of the outputs is what the canceller let through of the user, half the sum
    what it left of the echo (exact for a linear canceller, close for AEC3 whose gains follow
    signal power). The user's voice through a canceller with a silent far end is the
    reference for its shape: WebRTC's processing alone delays the capture by about 10 ms."""
    far = speech_like(SECONDS)  # [n]
    n = far.shape[0]
    echo = _room_echo(far)
    user = _user_voice(n)
    noise = (1e-4 * np.random.default_rng(1).standard_normal(n)).astype(np.float32)
    plus = _run(make(), (echo + user + noise).astype(np.float32), far)
    minus = _run(make(), (echo - user + noise).astype(np.float32), far)
    idle = _run(make(), user + noise, np.zeros(n, dtype=np.float32))
    user_out, echo_out = (plus - minus) / 2, (plus + minus) / 2
    talk = np.zeros(plus.shape[0], dtype=bool)
    for seconds in TALK_S:
        talk[_span(seconds)] = True
    mic = echo + noise
    with np.errstate(invalid="ignore", divide="ignore"):  # a silent output has no correlation
        corr = float(np.nan_to_num(np.corrcoef(user_out[talk], idle[talk])[0, 1]))
    return DoubleTalk(
        erle_db=_power_db(mic[_span(CONVERGED_S)]) - _power_db(plus[_span(CONVERGED_S)]),
        erle_after_db=(_power_db(mic[_span(AFTER_TALK_S)])
                       - _power_db(plus[_span(AFTER_TALK_S)])),
        echo_removed_db=_power_db(mic[: plus.shape[0]][talk]) - _power_db(echo_out[talk]),
        near_corr=corr,
        near_level_db=_power_db(user_out[talk]) - _power_db(user[: plus.shape[0]][talk]),
    )


def failed_checks(m: DoubleTalk) -> list[str]:
    checks = {
        "erle": m.erle_db >= 20.0,
        "erle_after": m.erle_after_db >= 20.0,
        "echo_removed": m.echo_removed_db >= 10.0,
        "near_corr": m.near_corr >= 0.6,
        "near_level": m.near_level_db >= -9.0,
    }
    return [name for name, ok in checks.items() if not ok]


def test_double_talk_removes_the_echo_and_keeps_the_user() -> None:
    measured = measure_double_talk(lambda: EchoCanceller(stream_delay_ms=ECHO_DELAY_MS))
    assert failed_checks(measured) == [], measured


class _Muting(EchoCanceller):
    """No echo left, and no user either."""

    def process(self, near: np.ndarray, far: np.ndarray, out: np.ndarray | None = None
                ) -> np.ndarray:
        return np.zeros(FRAME_SAMPLES, dtype=np.float32)


class _Ducking(EchoCanceller):
    """The real canceller, then 26 dB quieter: ERLE goes up, the user fades."""

    def process(self, near: np.ndarray, far: np.ndarray, out: np.ndarray | None = None
                ) -> np.ndarray:
        return 0.05 * super().process(near, far, out)


class _PassThrough(EchoCanceller):
    """Cancels nothing: the user is perfect, so is the echo."""

    def process(self, near: np.ndarray, far: np.ndarray, out: np.ndarray | None = None
                ) -> np.ndarray:
        return near.astype(np.float32, copy=True)


@pytest.mark.parametrize(("canceller", "caught_by"), [
    (_Muting, {"near_corr", "near_level"}),
    (_Ducking, {"near_level"}),
    (_PassThrough, {"erle", "erle_after", "echo_removed"}),
])
def test_the_checks_reject_muting_ducking_and_doing_nothing(
        canceller: type[EchoCanceller], caught_by: set[str]) -> None:
    measured = measure_double_talk(lambda: canceller(stream_delay_ms=ECHO_DELAY_MS))
    assert caught_by <= set(failed_checks(measured)), measured


def test_rejects_frames_of_the_wrong_size() -> None:
    with pytest.raises(ValueError):
        EchoCanceller().process(np.zeros(480, np.float32), np.zeros(480, np.float32))
