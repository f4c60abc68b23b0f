"""Read and write audio files for headless runs: any rate and channel count in, 24 kHz mono."""

from __future__ import annotations

import contextlib
import functools
import os
from pathlib import Path

import numpy as np

from app.frames import SAMPLE_RATE


class AudioFileError(ValueError):
    pass


def read_mono_24k(path: Path) -> np.ndarray:
    """Decode, resample to 24 kHz and mix down to mono float32 (sphn, moshi's audio I/O)."""
    import sphn

    path = Path(path)
    if path.is_dir():
        raise AudioFileError(f"input is a folder, not an audio file: {path}")
    if not path.is_file():
        raise AudioFileError(f"input file not found: {path}")
    try:
        pcm, rate = sphn.read(str(path))
        pcm = np.asarray(pcm, dtype=np.float32)
        if pcm.ndim == 2:
            pcm = pcm.mean(axis=0)
        if rate != SAMPLE_RATE:
            pcm = _resample_aligned(pcm, rate)
    except Exception as exc:  # sphn raises plain exceptions for undecodable files
        raise AudioFileError(f"cannot read audio from {path}: {exc}") from exc
    if pcm.size == 0:
        raise AudioFileError(f"{path} holds no audio")
    return np.ascontiguousarray(pcm)


def audio_file_rate(path: Path) -> int:
    """The sample rate a file holds its audio at (what a reader that does not resample gets)."""
    import sphn

    try:
        return int(sphn.FileReader(str(path)).sample_rate)
    except Exception as exc:  # sphn raises plain exceptions for undecodable files
        raise AudioFileError(f"cannot read audio from {path}: {exc}") from exc


@functools.lru_cache(maxsize=16)
def _resampler_delay(rate: int) -> int:
    """Output samples by which sphn's resampler delays its input (it depends on the rate)."""
    import sphn

    impulse = np.zeros(rate, dtype=np.float32)
    impulse[rate // 2] = 1.0
    out = sphn.resample(impulse, src_sample_rate=rate, dst_sample_rate=SAMPLE_RATE)
    return max(0, int(np.argmax(np.abs(out))) - SAMPLE_RATE // 2)


def _resample_aligned(pcm: np.ndarray, rate: int) -> np.ndarray:
    """Resample to 24 kHz keeping time aligned: no leading delay, no lost tail."""
    import sphn

    delay = _resampler_delay(rate)
    expected = round(pcm.shape[-1] * SAMPLE_RATE / rate)
    flush = np.zeros(int(np.ceil((delay + 64) * rate / SAMPLE_RATE)), dtype=np.float32)
    out = sphn.resample(np.concatenate([pcm, flush]), src_sample_rate=rate,
                        dst_sample_rate=SAMPLE_RATE)
    return np.ascontiguousarray(np.asarray(out, dtype=np.float32)[delay : delay + expected])


def partial_path(path: Path) -> Path:
    """Where a file is written before it is renamed to `path` complete (hidden, beside it)."""
    path = Path(path)
    return path.with_name(f".{path.name}.partial")


PROBE_BYTES = 64 * 1024  # written and synced to prove a file can be made and filled


def prove_writable(path: Path) -> None:
    """Create the temporary file `path` will be written through, fill it with a little
    data, sync it to the disk and remove it: a folder that exists but refuses files
    (`/proc`, a read-only mount) or a full disk fails here, before any work, not at the end.
    Raises OSError."""
    temporary = partial_path(path)
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, bytes(PROBE_BYTES))
            os.fsync(fd)
        finally:
            os.close(fd)
    finally:
        with contextlib.suppress(OSError):  # a folder that refused it may refuse this too
            temporary.unlink(missing_ok=True)


def write_wav_24k(path: Path, pcm: np.ndarray) -> None:
    write_wav(path, pcm, SAMPLE_RATE)


def write_wav(path: Path, pcm: np.ndarray, rate: int) -> None:
    """Write atomically: a temporary file beside it, renamed when complete. A full disk or
    any failure leaves no file whose header claims audio that is not there."""
    import sphn

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = partial_path(path)
    try:
        sphn.write_wav(str(temporary), np.asarray(pcm, dtype=np.float32), rate)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
