"""Streaming sample-rate conversion: LiveKit's resampler (already here for echo cancellation).

Microphones and speakers that do not run at 24 kHz, and the 16 kHz the VAD listens at, need
a converter that keeps its filter state from one block to the next. LiveKit's binding wraps a
maintained resampler, so we do not keep our own filter design. It works on 16-bit samples:
floats in [-1, 1] go in and come out scaled, which costs nothing audible. Its output lags by
a few milliseconds at the start (samples it holds until the next block); positions are not
shifted (an impulse at input sample n comes out at n x rate_out / rate_in).
"""

from __future__ import annotations

import numpy as np
from livekit import rtc

_SCALE = 32767.0


class StreamingResampler:
    def __init__(self, rate_in: int, rate_out: int,
                 quality: rtc.AudioResamplerQuality = rtc.AudioResamplerQuality.HIGH) -> None:
        self.rate_in, self.rate_out = rate_in, rate_out
        self._resampler = rtc.AudioResampler(rate_in, rate_out, num_channels=1, quality=quality)

    @staticmethod
    def _floats(frames: list[rtc.AudioFrame]) -> np.ndarray:
        if not frames:
            return np.zeros(0, dtype=np.float32)
        data = b"".join(bytes(frame.data) for frame in frames)
        return (np.frombuffer(data, dtype=np.int16).astype(np.float32) / _SCALE)

    def process(self, pcm: np.ndarray) -> np.ndarray:
        """One block ([n] float32); returns the output samples it makes available."""
        samples = (np.clip(np.asarray(pcm, np.float32), -1.0, 1.0) * _SCALE).round()
        samples = samples.astype(np.int16)
        if samples.size == 0:
            return np.zeros(0, dtype=np.float32)
        frame = rtc.AudioFrame(samples.tobytes(), self.rate_in, 1, samples.size)
        return self._floats(self._resampler.push(frame))

    __call__ = process

    def flush(self) -> np.ndarray:
        """What the filter still holds (at the end of a stream)."""
        return self._floats(self._resampler.flush())
