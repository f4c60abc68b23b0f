import numpy as np
import pytest

from app.audio.echo_canceller import EchoCanceller
from app.bench.audio_bench import speech_like

SR = 24000


def _power_db(x: np.ndarray) -> float:
    return 10 * np.log10(float(np.mean(x**2)) + 1e-20)


def test_removes_a_synthetic_room_echo_after_converging() -> None:
    far = speech_like(8.0)  # [192000]
    delay = int(0.04 * SR)
    echo = np.zeros_like(far)
    echo[delay:] = 0.5 * far[:-delay]
    echo[delay + 36 :] += 0.2 * far[: -delay - 36]
    echo[delay + 90 :] -= 0.1 * far[: -delay - 90]
    rng = np.random.default_rng(1)
    near = (echo + 1e-4 * rng.standard_normal(far.shape[0])).astype(np.float32)
    canceller = EchoCanceller(stream_delay_ms=40)
    out = np.concatenate([canceller.process(near[i : i + 1920], far[i : i + 1920])
                          for i in range(0, far.shape[0] - 1919, 1920)])
    after = slice(3 * SR, out.shape[0])  # converged
    erle = _power_db(near[after]) - _power_db(out[after])
    assert erle > 20.0, erle


def test_rejects_frames_of_the_wrong_size() -> None:
    with pytest.raises(ValueError):
        EchoCanceller().process(np.zeros(480, np.float32), np.zeros(480, np.float32))
