"""The settings dialog's "Test speaker" and "Test microphone" buttons.

Both open their own short-lived stream on the chosen device, so the user can check a device
before the conversation uses it. Neither blocks the caller (the Qt main thread): the tone plays
from PortAudio's callback and a daemon thread closes its stream after a bounded time, even if
the driver never reports the end.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable

import numpy as np
import sounddevice as sd

from app.audio.devices import resolve_device
from app.audio.live_audio import LEVEL_FLOOR_DB, rms_dbfs

log = logging.getLogger(__name__)


class SpeakerTest:
    """A short sine tone on one output device. `done` is set when it ended (or failed)."""

    def __init__(self, device_name: str | None, seconds: float = 0.6, frequency: float = 440.0,
                 volume: float = 0.2, timeout_s: float = 3.0) -> None:
        device = resolve_device(device_name, "output")
        self.device_name = device.name
        self.warning = device.warning
        self.error: str | None = None
        self.done = threading.Event()
        self._frequency = frequency
        self._volume = volume
        self._seconds = seconds
        self._timeout_s = timeout_s
        self._index = device.index
        self._rate = 0
        self._position = 0
        self._total = 0
        self._stream: sd.OutputStream | None = None

    def start(self) -> SpeakerTest:
        if self._index is None and not self.device_name:  # PortAudio: "querying device -1"
            self.error = ("no speaker was found on this computer: connect one (or start the "
                          "sound server), then test again")
            self.done.set()
            return self
        try:
            self._rate = int(sd.query_devices(self._index, "output")["default_samplerate"])
            self._total = int(self._seconds * self._rate)
            self._stream = sd.OutputStream(
                samplerate=self._rate, device=self._index, channels=1, dtype="float32",
                callback=self._callback, finished_callback=self.done.set,
            )
            self._stream.start()
        except Exception as exc:  # PortAudioError, ValueError for a vanished device
            self.error = f"could not play on {self.device_name or 'the default speaker'}: {exc}"
            self.done.set()
            return self
        threading.Thread(target=self._close_when_done, name="speaker-test", daemon=True).start()
        return self

    def wait(self, timeout: float) -> bool:
        """True when the tone has finished within `timeout`."""
        return self.done.wait(timeout)

    def stop(self) -> None:
        self.done.set()

    def _callback(self, outdata: np.ndarray, frames: int, _time: object,
                  _status: sd.CallbackFlags) -> None:
        # outdata: [frames, 1]
        n = np.arange(self._position, self._position + frames)
        tone = self._volume * np.sin(2 * math.pi * self._frequency * n / self._rate)
        tone[n >= self._total] = 0.0
        outdata[:, 0] = tone
        self._position += frames
        if self._position >= self._total:
            raise sd.CallbackStop

    def _close_when_done(self) -> None:
        if not self.done.wait(self._seconds + self._timeout_s):
            self.error = f"the tone on {self.device_name!r} did not finish in time"
        stream = self._stream
        if stream is not None:
            try:
                stream.abort(ignore_errors=True)
                stream.close(ignore_errors=True)
            except Exception as exc:  # a device that vanished mid-tone
                log.warning("closing the speaker test stream failed: %s", exc)
        self.done.set()


def play_test_tone(device_name: str | None, seconds: float = 0.6, frequency: float = 440.0,
                   timeout_s: float = 3.0) -> SpeakerTest:
    """Start a short tone on the named output device and return at once."""
    return SpeakerTest(device_name, seconds, frequency, timeout_s=timeout_s).start()


def mic_level_probe(device_name: str | None) -> tuple[Callable[[], float], Callable[[], None]]:
    """Open the named input device and report its level (dBFS) until `stop()` is called.

    Returns (read_level, stop). read_level is safe from any thread; stop is idempotent and
    waits at most 2 s for the driver. A device that cannot be opened reads as silence
    (LEVEL_FLOOR_DB) and the failure is logged.
    """
    device = resolve_device(device_name, "input")
    if device.warning:
        log.warning(device.warning)
    level = [LEVEL_FLOOR_DB]

    def callback(indata: np.ndarray, _frames: int, _time: object,
                 _status: sd.CallbackFlags) -> None:
        level[0] = rms_dbfs(indata[:, 0])  # indata: [frames, 1]

    try:
        opened = sd.InputStream(
            device=device.index, channels=1, dtype="float32", callback=callback)
        opened.start()
        stream: sd.InputStream | None = opened
    except Exception as exc:
        log.warning("could not open microphone %r: %s", device.name, exc)
        stream = None

    lock = threading.Lock()

    def stop() -> None:
        nonlocal stream
        with lock:
            closing, stream = stream, None
        if closing is None:
            return

        def close() -> None:
            closing.abort(ignore_errors=True)
            closing.close(ignore_errors=True)

        closer = threading.Thread(target=close, name="mic-probe-close", daemon=True)
        closer.start()
        closer.join(2.0)
        level[0] = LEVEL_FLOOR_DB

    return (lambda: level[0]), stop


class MicLevelMeter:
    """The settings dialog's LevelMeter: `level()` is the linear peak (0..1) seen since the
    previous call, polled from the GUI thread; `close()` stops the capture (idempotent)."""

    def __init__(self, device_name: str | None) -> None:
        device = resolve_device(device_name, "input")
        if device.index is None and not device.name:  # PortAudio: "querying device -1"
            raise RuntimeError("no microphone was found on this computer: connect one (or "
                               "start the sound server), then test again")
        self.warning = device.warning
        self._peak = 0.0

        def callback(indata: np.ndarray, _frames: int, _time: object,
                     _status: sd.CallbackFlags) -> None:
            self._peak = max(self._peak, float(np.max(np.abs(indata))))  # indata: [frames, 1]

        self._stream: sd.InputStream | None = sd.InputStream(
            device=device.index, channels=1, dtype="float32", callback=callback)
        self._stream.start()

    def level(self) -> float:
        peak, self._peak = self._peak, 0.0
        return min(1.0, peak)

    def close(self) -> None:
        stream, self._stream = self._stream, None
        if stream is None:
            return
        closer = threading.Thread(target=lambda: (stream.abort(ignore_errors=True),
                                                  stream.close(ignore_errors=True)),
                                  name="mic-meter-close", daemon=True)
        closer.start()
        closer.join(2.0)


def play_test_tone_blocking(device_name: str | None, seconds: float = 0.6,
                            timeout_s: float = 3.0) -> None:
    """The dialog's PlayTestTone: runs off the GUI thread, returns when the tone is over,
    raises RuntimeError when the device cannot play."""
    tone = play_test_tone(device_name, seconds, timeout_s=timeout_s)
    if not tone.wait(seconds + timeout_s + 1.0):
        raise RuntimeError(f"the tone on {tone.device_name or 'the default speaker'} did not "
                           "finish in time")
    if tone.error is not None:
        raise RuntimeError(tone.error)
