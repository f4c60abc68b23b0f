"""An audio source that plays a file into the conversation at a microphone's pace.

Used where no sound card is wanted: the `--screenshot` run and tests of the app's
lifetime. After the file it keeps sending silence, like a quiet room. The model's frames
are kept (bounded) so a test can check that the reply reached the speaker side.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable

import numpy as np

from app.frames import FRAME_S, FRAME_SAMPLES


class FileAudioSource:
    def __init__(self, pcm: np.ndarray, keep_played_frames: int = 500) -> None:
        self._pcm = np.asarray(pcm, dtype=np.float32)
        self.muted = False
        self.played: collections.deque[np.ndarray] = collections.deque(maxlen=keep_played_frames)
        self.played_count = 0  # every frame played, beyond the bounded `played` window
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._mic_db = -120.0
        self._speaker_db = -120.0

    @staticmethod
    def _db(frame: np.ndarray) -> float:
        rms = float(np.sqrt(np.mean(np.square(frame), dtype=np.float64)))
        return 20.0 * np.log10(max(rms, 1e-6))

    def start(self, on_frame: Callable[[np.ndarray], object]) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._feed, args=(on_frame,),
                                         name="file-audio", daemon=True)
        self._thread.start()

    def _feed(self, on_frame: Callable[[np.ndarray], object]) -> None:
        period = FRAME_S
        next_at = time.monotonic()
        index = 0
        silence = np.zeros(FRAME_SAMPLES, dtype=np.float32)
        while not self._stop.is_set():
            start = index * FRAME_SAMPLES
            frame = self._pcm[start : start + FRAME_SAMPLES]
            if len(frame) < FRAME_SAMPLES:
                frame = silence if len(frame) == 0 else np.concatenate(
                    [frame, silence[: FRAME_SAMPLES - len(frame)]])
            if self.muted:
                frame = silence
            self._mic_db = self._db(frame)
            on_frame(frame.copy())
            index += 1
            next_at += period
            self._stop.wait(max(0.0, next_at - time.monotonic()))

    def play(self, frame: np.ndarray) -> None:
        self._speaker_db = self._db(frame)
        self.played.append(frame)
        self.played_count += 1

    def levels(self) -> tuple[float, float]:
        return self._mic_db, self._speaker_db

    def counters(self) -> dict[str, int]:
        return {"dropped": 0, "underruns": 0, "overruns": 0}

    def stop(self, timeout: float = 5.0) -> bool:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            return not self._thread.is_alive()
        return True
