"""Read and write audio files for headless runs: any rate and channel count in, 24 kHz mono."""

from __future__ import annotations

from pathlib import Path

import numpy as np

SAMPLE_RATE = 24000


class AudioFileError(ValueError):
    pass


def read_mono_24k(path: Path) -> np.ndarray:
    """Decode, resample to 24 kHz and mix down to mono float32 (sphn, moshi's audio I/O)."""
    import sphn

    path = Path(path)
    if not path.is_file():
        raise AudioFileError(f"input file not found: {path}")
    try:
        pcm, rate = sphn.read(str(path))
        pcm = np.asarray(pcm, dtype=np.float32)
        if pcm.ndim == 2:
            pcm = pcm.mean(axis=0)
        if rate != SAMPLE_RATE:
            # The resampler pads its tail: trim to the input's own duration.
            expected = round(pcm.shape[-1] * SAMPLE_RATE / rate)
            pcm = sphn.resample(pcm, src_sample_rate=rate, dst_sample_rate=SAMPLE_RATE)
            pcm = np.asarray(pcm, dtype=np.float32)[:expected]
    except Exception as exc:  # sphn raises plain exceptions for undecodable files
        raise AudioFileError(f"cannot read audio from {path}: {exc}") from exc
    if pcm.size == 0:
        raise AudioFileError(f"{path} holds no audio")
    return np.ascontiguousarray(pcm)


def write_wav_24k(path: Path, pcm: np.ndarray) -> None:
    import sphn

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    sphn.write_wav(str(path), np.asarray(pcm, dtype=np.float32), SAMPLE_RATE)
