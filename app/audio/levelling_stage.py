"""The leveller's own thread, between the microphone and its listeners (engine, ASR).

Levelling costs a few milliseconds of numpy per 80 ms frame (a noise gate's STFTs and a
loudness meter): too much for a PortAudio callback, which must return at once. So the
callback pushes the raw frame here (timeout 0: a full queue drops and counts it), and this
thread levels it and hands the same levelled array to every consumer, with the timeout the
frame came with: live audio keeps dropping rather than waiting (a refused frame is counted),
a file feeder keeps waiting for room until the consumer takes it or the stage is stopped (a
file loses no frame, even while the engine is still warming up). Consumers must not write
into the frame they receive (they all share it).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np

from app.audio.user_leveller import LevellerSettings, UserLeveller
from app.frame_worker import EndOfInput, FrameWorker

log = logging.getLogger(__name__)

# (frame [1920] float32, timeout) -> accepted; e.g. a FrameWorker's push_frame.
FrameConsumer = Callable[[np.ndarray, float | None], bool]


class LevellingStage(FrameWorker):
    def __init__(
        self,
        consumers: list[FrameConsumer],
        settings: LevellerSettings | None = None,
        enabled: bool = True,
        queue_frames: int = 25,  # 2 s of audio
        on_end_of_input: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(queue_frames, "user-levelling")
        self._consumers = list(consumers)
        self._leveller = UserLeveller(settings)
        self._enabled = enabled
        self._on_end_of_input = on_end_of_input
        # Read by the status bar from the GUI thread; written by this stage's thread only.
        self.frames_levelled = 0
        self.dropped_downstream = 0  # frames a consumer refused
        self.last_gain_db = 0.0  # the leveller's smoothed gain, before its limiter; 0 when off
        self.last_loudness_lufs: float | None = None

    # ---- any thread -------------------------------------------------------------------

    @property
    def enabled(self) -> bool:
        return self._enabled

    def set_enabled(self, enabled: bool) -> None:
        """Level (True) or pass frames through untouched (False), from the next frame on."""
        self._enabled = bool(enabled)

    # ---- levelling thread -------------------------------------------------------------

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                item = self._next_frame()
                if item is None:
                    continue
                if isinstance(item, EndOfInput):
                    if self._on_end_of_input is not None:
                        self._on_end_of_input()
                    return
                # The timeout travels with the frame and is used again to hand it on.
                frame, timeout = item
                out = self._level(frame)
                for consumer in self._consumers:
                    self._hand_on(consumer, out, timeout)
        except Exception:  # the thread must never die silently
            log.exception("the levelling stage failed; the microphone no longer reaches "
                          "the model")

    def _hand_on(self, consumer: FrameConsumer, frame: np.ndarray, timeout: float | None
                 ) -> None:
        accepted = consumer(frame, timeout)
        while not accepted and timeout != 0 and not self._stop.is_set():
            accepted = consumer(frame, timeout)  # a file's frame waits for room
        if not accepted:
            self.dropped_downstream += 1

    def _level(self, frame: np.ndarray) -> np.ndarray:
        if not self._enabled:
            self.last_gain_db = 0.0
            self.last_loudness_lufs = None
            return frame
        out = self._leveller.process(frame)
        self.frames_levelled += 1
        self.last_gain_db = self._leveller.gain_db
        self.last_loudness_lufs = self._leveller.loudness_lufs
        return out
