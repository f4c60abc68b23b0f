"""Audio file I/O for headless runs: any rate and channel count in, 24 kHz mono out."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import sphn

from app.audio_file import AudioFileError, read_mono_24k, write_wav_24k
from app.frames import SAMPLE_RATE

FRAME_SAMPLES = 1920  # one 80 ms frame at 24 kHz


def _tone(freq: float, seconds: float, rate: int, amplitude: float = 0.5) -> np.ndarray:
    t = np.arange(int(round(seconds * rate))) / rate
    return (amplitude * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def _spectrum(pcm: np.ndarray, rate: int) -> tuple[np.ndarray, np.ndarray]:
    windowed = pcm * np.hanning(len(pcm))
    return np.fft.rfftfreq(len(pcm), 1.0 / rate), np.abs(np.fft.rfft(windowed))


def _peak_hz(pcm: np.ndarray, rate: int) -> float:
    freqs, mags = _spectrum(pcm, rate)
    return float(freqs[np.argmax(mags)])


def _magnitude_at(pcm: np.ndarray, rate: int, hz: float) -> float:
    freqs, mags = _spectrum(pcm, rate)
    near = np.abs(freqs - hz) <= 3.0
    return float(mags[near].max())


def test_stereo_44k1_is_resampled_to_24k_mono(tmp_path: Path):
    seconds = 2.0
    left = _tone(440.0, seconds, 44100)
    stereo = np.stack([left, left])
    path = tmp_path / "stereo.wav"
    sphn.write_wav(str(path), stereo, 44100)

    pcm = read_mono_24k(path)
    assert pcm.dtype == np.float32
    assert pcm.ndim == 1
    assert pcm.flags["C_CONTIGUOUS"]
    assert abs(len(pcm) - seconds * SAMPLE_RATE) <= FRAME_SAMPLES
    assert abs(_peak_hz(pcm, SAMPLE_RATE) - 440.0) <= 2.0
    # The level survives (within 10%), it is neither doubled nor halved by the mix-down.
    middle = pcm[len(pcm) // 4 : 3 * len(pcm) // 4]
    assert np.sqrt(np.mean(middle**2)) == pytest.approx(0.5 / np.sqrt(2), rel=0.1)


def test_both_stereo_channels_reach_the_mono_mix(tmp_path: Path):
    stereo = np.stack([_tone(440.0, 2.0, 44100), _tone(1000.0, 2.0, 44100)])
    path = tmp_path / "two-tones.wav"
    sphn.write_wav(str(path), stereo, 44100)

    pcm = read_mono_24k(path)
    a = _magnitude_at(pcm, SAMPLE_RATE, 440.0)
    b = _magnitude_at(pcm, SAMPLE_RATE, 1000.0)
    background = _magnitude_at(pcm, SAMPLE_RATE, 3000.0)
    assert a > 50 * background
    assert b > 50 * background
    assert a == pytest.approx(b, rel=0.2)  # equal weight for both channels
    assert np.max(np.abs(pcm)) <= 1.0


@pytest.mark.parametrize("rate", [16000, 48000])
def test_other_rates_come_out_at_24k(tmp_path: Path, rate: int):
    path = tmp_path / f"mono-{rate}.wav"
    sphn.write_wav(str(path), _tone(440.0, 1.5, rate), rate)
    pcm = read_mono_24k(path)
    assert pcm.ndim == 1
    assert abs(len(pcm) - 1.5 * SAMPLE_RATE) <= FRAME_SAMPLES
    assert abs(_peak_hz(pcm, SAMPLE_RATE) - 440.0) <= 2.0


def test_24k_mono_round_trips_through_write_wav_24k(tmp_path: Path):
    original = _tone(300.0, 0.5, SAMPLE_RATE)
    path = tmp_path / "nested" / "dir" / "out.wav"  # parent folders are created
    write_wav_24k(path, original)
    pcm = read_mono_24k(path)
    assert len(pcm) == len(original)
    np.testing.assert_allclose(pcm, original, atol=2e-4)  # 16-bit quantisation


def test_missing_file_is_reported_by_name(tmp_path: Path):
    path = tmp_path / "absent.wav"
    with pytest.raises(AudioFileError) as info:
        read_mono_24k(path)
    message = str(info.value)
    assert "not found" in message
    assert str(path) in message


def test_a_folder_is_not_an_audio_file(tmp_path: Path):
    with pytest.raises(AudioFileError, match="folder"):
        read_mono_24k(tmp_path)


@pytest.mark.parametrize(
    "content",
    [b"RIFF" + b"\x00garbage" * 200, b"definitely not audio\n" * 50, b""],
    ids=["bad-riff", "text", "empty-file"],
)
def test_garbage_file_raises_audio_file_error(tmp_path: Path, content: bytes):
    path = tmp_path / "garbage.wav"
    path.write_bytes(content)
    with pytest.raises(AudioFileError) as info:
        read_mono_24k(path)
    message = str(info.value)
    assert "cannot read audio" in message
    assert str(path) in message


def test_a_wav_without_samples_is_rejected(tmp_path: Path):
    path = tmp_path / "silent.wav"
    sphn.write_wav(str(path), np.zeros(0, dtype=np.float32), SAMPLE_RATE)
    with pytest.raises(AudioFileError, match="no audio"):
        read_mono_24k(path)


def test_audio_file_error_is_a_value_error():
    assert issubclass(AudioFileError, ValueError)


@pytest.mark.parametrize("rate", [8000, 16000, 44100, 48000])
def test_resampling_keeps_time_aligned_and_the_last_sample(tmp_path: Path, rate: int):
    """A click at 1.000 s reads back at 1.000 s, and a click on the very last sample is kept
    (the resampler's own delay is compensated, not cut from the end)."""
    pcm = np.zeros(2 * rate, dtype=np.float32)
    pcm[rate] = 1.0
    pcm[-1] = 1.0
    path = tmp_path / f"click_{rate}.wav"
    sphn.write_wav(str(path), pcm, rate)
    out = read_mono_24k(path)
    assert len(out) == 48000
    assert abs(int(np.argmax(np.abs(out[:36000]))) - 24000) <= 1
    assert np.abs(out[-4:]).max() > 0.2
