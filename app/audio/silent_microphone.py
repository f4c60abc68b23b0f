"""The audio source of a conversation without a microphone: silence at a microphone's pace.

A conversation without audio devices is a mode, not an error: the speech model keeps running
(so typed questions and "Read this" land as spans, and its words are shown), it just hears a
quiet room. A timer thread hands it one 80 ms frame of zeros per 80 ms of wall time, as a
microphone would. The model's audio goes to `speaker` when there is one (a live output
stream), else it is dropped and counted.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import numpy as np

from app.frames import FRAME_S, FRAME_SAMPLES

# As in live_audio, which is not imported: it needs PortAudio, and this source is what a
# machine without any sound stack uses.
LEVEL_FLOOR_DB = -100.0


class SilentMicrophone:
    """An AudioSource (see app.conversation.session) with no input device."""

    def __init__(self, speaker=None) -> None:
        """`speaker`: an AudioSource used only for playback (its own start() is the
        caller's business), or None when there is no output device either."""
        self.speaker = speaker
        self.muted = False  # nothing to mute, but the session sets it on every source
        self.dropped_playback = 0  # the model's frames that had nowhere to go
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, on_frame: Callable[[np.ndarray], object]) -> bool:
        self._stop.clear()
        self._thread = threading.Thread(target=self._feed, args=(on_frame,),
                                        name="silent-microphone", daemon=True)
        self._thread.start()
        return True

    def _feed(self, on_frame: Callable[[np.ndarray], object]) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            on_frame(np.zeros(FRAME_SAMPLES, dtype=np.float32))  # [1920]; a new array: queued
            next_at += FRAME_S
            late = time.monotonic() - next_at
            if late > 10 * FRAME_S:  # the machine stalled: do not burst to catch up
                next_at = time.monotonic()
            self._stop.wait(max(0.0, next_at - time.monotonic()))

    def play(self, frame: np.ndarray) -> None:
        if self.speaker is not None:
            self.speaker.play(frame)
        else:
            self.dropped_playback += 1

    def levels(self) -> tuple[float, float]:
        speaker = self.speaker.levels()[1] if self.speaker is not None else LEVEL_FLOOR_DB
        return LEVEL_FLOOR_DB, speaker

    def counters(self) -> dict[str, int]:
        if self.speaker is not None:
            return self.speaker.counters()
        return {"dropped": 0, "underruns": 0, "overruns": 0}

    def stop(self, timeout: float = 5.0) -> bool:
        self._stop.set()
        ok = True
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)
            ok = not self._thread.is_alive()
        if self.speaker is not None:
            ok = self.speaker.stop(timeout) and ok
        return ok
