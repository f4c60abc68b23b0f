"""`bench echo` tells cancelling from muting: with the user talking over the model, a
canceller that outputs silence keeps none of their speech, the app's keeps a good part of it;
on the live path (a null sink: a digital loopback, and said so) and in a simulated room."""

from __future__ import annotations

import io
import shutil
import subprocess
import wave

import numpy as np
import pytest

from app.bench.audio_bench import MODEL_REPLY, USER_PHRASE, run_echo_bench, run_room_echo


class Muting:
    """A test double: cancels everything by sending silence."""

    def set_stream_delay_ms(self, delay_ms: int) -> None:
        pass

    def process(self, near: np.ndarray, far: np.ndarray, out: np.ndarray | None = None
                ) -> np.ndarray:
        return np.zeros_like(near)


class PassThrough(Muting):
    """A test double: cancels nothing."""

    def process(self, near: np.ndarray, far: np.ndarray, out: np.ndarray | None = None
                ) -> np.ndarray:
        return near.copy()


def test_in_a_simulated_room_muting_keeps_no_speech_and_the_canceller_keeps_some() -> None:
    real = run_room_echo(seconds=10.0, converge_s=3.0)
    muting = run_room_echo(Muting, seconds=10.0, converge_s=3.0)
    passing = run_room_echo(PassThrough, seconds=10.0, converge_s=3.0)
    assert real["room"]["rt60_ms_measured"] > 150  # a room, not a delay line
    assert real["erle_db"] > 20.0
    assert real["double_talk"]["near_end_preservation"] > 0.05
    # Muting "wins" on ERLE; near-end preservation shows what it costs.
    assert muting["erle_db"] > real["erle_db"]
    assert muting["double_talk"]["near_end_preservation"] < 0.01
    assert passing["erle_db"] < 1.0
    assert 0.9 < passing["double_talk"]["near_end_preservation"] < 1.1


def test_live_digital_loopback_double_talk() -> None:
    real = run_echo_bench(seconds=8.0, converge_s=3.0, room=False)
    muting = run_echo_bench(seconds=8.0, converge_s=3.0, canceller_factory=Muting, room=False)
    for result in (real, muting):
        assert result["live"]["loopback"]["kind"] == "digital"
        assert "digital" in result["includes"]["live.loopback.kind"]
        assert result["live"]["devices"]["errors"] == []
    assert muting["canceller"] == "Muting"
    assert real["live"]["erle_db"] > 20.0
    assert 0.9 < real["live"]["double_talk"]["user_gain_at_mic"] < 1.1, real  # user found
    assert real["live"]["double_talk"]["near_end_preservation"] > 0.1
    assert muting["live"]["erle_db"] > real["live"]["erle_db"]
    assert muting["live"]["double_talk"]["near_end_preservation"] < 0.01


def _espeak_24k(text: str, voice: str, words_per_minute: int) -> np.ndarray:
    """espeak-ng's 22.05 kHz speech resampled by a fixed polyphase filter (repeatable, unlike
    the app's streaming resampler), trimmed, peak 0.5: [n] float32 at 24 kHz."""
    from scipy.signal import resample_poly  # pyroomacoustics' own dependency

    binary = shutil.which("espeak-ng")
    if binary is None:
        pytest.fail("espeak-ng is not installed; the room test needs real speech "
                    "(install it with: apt-get install -y espeak-ng)")
    wav = subprocess.run([binary, "-v", voice, "-s", str(words_per_minute), "--stdout", text],
                         capture_output=True, timeout=30, check=True).stdout
    with wave.open(io.BytesIO(wav)) as reader:
        assert reader.getframerate() == 22050
        pcm = np.frombuffer(reader.readframes(reader.getnframes()), dtype=np.int16)
    speech = resample_poly(pcm.astype(np.float64) / 32768.0, 160, 147)  # 22050 -> 24000
    loud = np.flatnonzero(np.abs(speech) > 0.01 * np.max(np.abs(speech)))
    speech = speech[loud[0] : loud[-1] + 1]
    return (0.5 * speech / np.max(np.abs(speech))).astype(np.float32)


def test_in_a_simulated_room_the_user_is_heard_while_the_model_talks() -> None:
    """Issue 19, item 25: with AEC3 alone the user kept 15 % of their speech energy here (its
    suppressor took them for echo); the linear echo filter before it keeps more than half,
    and the echo still loses 30 dB."""
    voices = (_espeak_24k(MODEL_REPLY, "en-us", 160),
              _espeak_24k(USER_PHRASE, "en-us+f3", 150))
    result = run_room_echo(seconds=10.0, converge_s=3.0, voices=voices)
    assert result["erle_db"] >= 30.0, result
    assert result["double_talk"]["near_end_preservation"] >= 0.5, result
    assert result["settings"]["linear_prefilter"]["span_ms"] > 0, result["settings"]  # reported
