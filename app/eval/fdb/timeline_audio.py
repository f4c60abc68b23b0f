"""The reply on the input's timeline: same duration, sample for sample, at the scorers' rate.

The engine gives 24 kHz. The benchmark's example outputs are 16 kHz mono 16-bit WAV, and its
backchannel scorer hands the file to Silero without a rate (Silero then assumes 16 kHz), so
16 kHz is the default. Resampling keeps positions, so a word stays at the time it was spoken.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from app.frames import SAMPLE_RATE as ENGINE_RATE

SEGMENT_RATE = 16000  # the rate the benchmark's Silero VAD call is told its samples are at


class SampleAudioError(ValueError):
    pass


@dataclass(frozen=True)
class AudioInfo:
    samples: int
    rate: int

    @property
    def seconds(self) -> float:
        return self.samples / self.rate

    def samples_at(self, rate: int) -> int:
        """The same duration in samples at `rate`."""
        return round(self.samples * rate / self.rate)


def audio_info(path: Path) -> AudioInfo:
    """Length and rate of an audio file; SampleAudioError when it cannot be decoded."""
    import sphn

    try:
        pcm, rate = sphn.read(str(path))
    except Exception as exc:  # sphn raises plain exceptions for undecodable files
        raise SampleAudioError(f"cannot read {Path(path).name}: {exc}") from exc
    samples = int(np.asarray(pcm).shape[-1])
    if samples == 0 or rate <= 0:
        raise SampleAudioError(f"{Path(path).name} holds no audio")
    return AudioInfo(samples, int(rate))


def resample(pcm: np.ndarray, src: int, dst: int) -> np.ndarray:
    """Time-aligned: output sample k is at time k / dst, as input sample j is at j / src
    (the project's resampler, flushed at the end), exactly as long as the input."""
    from app.audio.resampler import StreamingResampler

    pcm = np.asarray(pcm, dtype=np.float32)
    if src == dst:
        return pcm
    resampler = StreamingResampler(src, dst)
    out = np.concatenate([resampler.process(pcm), resampler.flush()])
    expected = round(len(pcm) * dst / src)
    return np.pad(out[:expected], (0, max(0, expected - len(out))))


def on_timeline(pcm_24k: np.ndarray, length: int, rate: int) -> np.ndarray:
    """The engine's reply at `rate`, exactly `length` samples (cut or padded with silence)."""
    pcm = resample(pcm_24k, ENGINE_RATE, rate)[:length]
    return np.pad(pcm, (0, length - len(pcm)))


def write_wav(path: Path, pcm: np.ndarray, rate: int) -> None:
    """Mono 16-bit WAV, written beside its name and renamed: a file that exists is whole."""
    from app.audio_file import write_wav as write_whole

    write_whole(path, np.clip(np.asarray(pcm, np.float32), -1.0, 1.0), rate)
