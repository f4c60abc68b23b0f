"""A private PulseAudio daemon with a null sink: real PortAudio I/O on a machine without a sound
card. What is played to the sink comes back from its monitor, the default source."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session")
def null_sink() -> Iterator[None]:
    if shutil.which("pulseaudio") is None or shutil.which("pactl") is None:
        pytest.fail("the audio tests need PulseAudio: apt-get install -y --no-install-recommends "
                    "libportaudio2 pulseaudio pulseaudio-utils libasound2-plugins")
    from app.bench.audio_bench import PrivatePulseAudio

    with PrivatePulseAudio(timeout_s=15.0):
        yield


@pytest.fixture(autouse=True)
def private_config(tmp_path, monkeypatch) -> None:
    """Windows opened here remember their state in a temporary folder, never the user's."""
    monkeypatch.setenv("CONTEXTSPAN_CONFIG_DIR", str(tmp_path / "config"))
