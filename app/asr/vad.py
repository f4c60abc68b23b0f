"""End of turn by a real voice activity detector: Silero VAD on the user's 24 kHz frames.

Silero wants 16 kHz audio in chunks of 512 samples (32 ms). Each 80 ms frame is resampled
24 kHz -> 16 kHz by a streaming polyphase filter (up 2, low-pass, down 3), which keeps its
history across frames so chunk borders leave no clicks; 1920 samples give exactly 1280.

A turn starts when the speech probability reaches `threshold` and ends once it has stayed
below `threshold - 0.15` (Silero's own hysteresis) for `hang_s`; bursts shorter than
`min_speech_s` are dropped as clicks and coughs. Times are seconds of user audio.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt
import torch

from app.audio.resampler import StreamingResampler
from app.frames import SAMPLE_RATE

VAD_RATE = 16000
VAD_CHUNK = 512  # samples Silero takes at 16 kHz
CHUNK_S = VAD_CHUNK / VAD_RATE  # 0.032


@dataclass(frozen=True)
class VadOptions:
    threshold: float = 0.5
    hang_s: float = 0.6  # silence that ends a turn
    min_speech_s: float = 0.25  # shorter bursts are not speech
    hysteresis: float = 0.15


@dataclass(frozen=True)
class SpeechStarted:
    start_s: float


@dataclass(frozen=True)
class SpeechEnded:
    start_s: float
    end_s: float  # when the speech stopped
    decided_at_s: float  # when the hang time ran out (end_s + hang_s, to a chunk)


VadEvent = SpeechStarted | SpeechEnded


class SileroModel(Protocol):
    """Silero's JIT model, as used here: a speech probability per 512-sample chunk, with
    its recurrent state kept between calls until reset."""

    def __call__(self, chunk: torch.Tensor, sample_rate: int, /) -> torch.Tensor: ...
    def reset_states(self) -> None: ...


def load_silero_model() -> SileroModel:
    """Silero's JIT model from its package (no download).

    Importing silero_vad sets torch's thread count to 1 for the whole process; the
    count is put back so the speech engine running beside it keeps its threads.
    """
    threads = torch.get_num_threads()
    try:
        with warnings.catch_warnings():  # its resource lookup uses a deprecated API
            warnings.simplefilter("ignore", DeprecationWarning)
            import silero_vad

            return silero_vad.load_silero_vad()
    finally:
        torch.set_num_threads(threads)


class SileroTurnDetector:
    """Feed 24 kHz frames; get speech start / end events. One thread only."""

    def __init__(self, options: VadOptions | None = None,
                 model: SileroModel | None = None) -> None:
        self.options = options or VadOptions()
        self.model = model if model is not None else load_silero_model()
        self.model.reset_states()
        self._resample = StreamingResampler(SAMPLE_RATE, VAD_RATE)  # the VAD listens at 16 kHz
        # 16 kHz samples not yet in a chunk
        self._pending: npt.NDArray[np.float32] = np.zeros(0, dtype=np.float32)
        self._chunks = 0  # chunks scored so far
        self._in_speech = False
        self._start_s = 0.0
        self._silence_since: float | None = None
        self._reported_start = False
        self.last_prob = 0.0

    @property
    def in_speech(self) -> bool:
        return self._in_speech

    def push(self, pcm: np.ndarray) -> list[VadEvent]:
        """One frame (any length) of 24 kHz float32 audio."""
        self._pending = np.concatenate([self._pending, self._resample(pcm)])
        events: list[VadEvent] = []
        while len(self._pending) >= VAD_CHUNK:
            chunk, self._pending = self._pending[:VAD_CHUNK], self._pending[VAD_CHUNK:]
            with torch.no_grad():
                prob = float(self.model(torch.from_numpy(chunk.copy()), VAD_RATE))  # [512]
            events.extend(self._on_prob(prob, self._chunks * CHUNK_S))
            self._chunks += 1
        return events

    def _on_prob(self, prob: float, t: float) -> list[VadEvent]:
        self.last_prob = prob
        opts = self.options
        events: list[VadEvent] = []
        if not self._in_speech:
            if prob >= opts.threshold:
                self._in_speech = True
                self._start_s = t
                self._silence_since = None
                self._reported_start = False
            return events
        if prob >= opts.threshold:
            self._silence_since = None
        elif prob < opts.threshold - opts.hysteresis and self._silence_since is None:
            self._silence_since = t
        speech_end = self._silence_since
        long_enough = (speech_end if speech_end is not None else t) - self._start_s
        if not self._reported_start and long_enough >= opts.min_speech_s:
            self._reported_start = True
            events.append(SpeechStarted(round(self._start_s, 4)))
        if speech_end is not None and t + CHUNK_S - speech_end >= opts.hang_s - 1e-9:
            self._in_speech = False
            if self._reported_start:
                decided = round(t + CHUNK_S, 4)
                events.append(SpeechEnded(round(self._start_s, 4), round(speech_end, 4), decided))
            self._silence_since = None
        return events
