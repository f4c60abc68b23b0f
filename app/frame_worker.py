"""A thread fed 80 ms audio frames through a bounded queue: the engine's and the ASR's shape.

Live audio pushes with timeout 0 (a full queue drops the frame and counts it, the audio
callback never waits); a file feeder passes a timeout and waits for room. The subclass's
`_run` reads frames with `_next_frame` (each with the timeout it was pushed with) and ends on
the end-of-input marker or on stop.
"""

from __future__ import annotations

import queue
import time

import numpy as np
import numpy.typing as npt

from app.frames import FRAME_SAMPLES
from app.thread_owner import ThreadOwner

Frame = npt.NDArray[np.float32]  # 1920 samples at 24 kHz


class EndOfInput:
    """What ends a queue of frames: no more will come (one of it: END_OF_INPUT)."""


END_OF_INPUT = EndOfInput()

# A frame as a worker's queue holds it: the frame, and the timeout it was pushed with (a
# stage that hands it on waits as long again: live audio never, a file's feeder for room).
QueuedFrame = tuple[Frame, float | None]


class FrameWorker(ThreadOwner):
    def __init__(self, queue_frames: int, thread_name: str) -> None:
        super().__init__(thread_name)
        self._input: queue.Queue[QueuedFrame | EndOfInput] = queue.Queue(queue_frames)
        self.dropped_frames = 0

    def push_frame(self, pcm: np.ndarray, timeout: float | None = 0.0) -> bool:
        """Queue one 1920-sample frame. With timeout 0 (live audio) a full queue drops the
        frame and counts it; a file feeder passes a timeout and waits for room."""
        if pcm.shape != (FRAME_SAMPLES,):
            raise ValueError(f"a frame is {FRAME_SAMPLES} samples, got shape {pcm.shape}")
        item = (np.asarray(pcm, dtype=np.float32), timeout)
        try:
            if timeout == 0:
                self._input.put_nowait(item)
            else:
                self._input.put(item, timeout=timeout)
            return True
        except queue.Full:
            self.dropped_frames += 1
            return False

    def room(self) -> int:
        """Frames its queue takes now without waiting (a caller's probe: nothing counted)."""
        return max(0, self._input.maxsize - self._input.qsize())

    def waiting(self) -> int:
        """Frames queued and not yet taken by the thread."""
        return self._input.qsize()

    def finish_input(self, timeout: float | None = 10.0) -> None:
        """No more frames will come: the thread drains the queue, then ends.

        Waits for room while the thread lives (a slow start-up can keep a file's queue
        full for a while); `timeout` None waits as long as that. Raises queue.Full only
        when the timeout passes with the thread still alive and the queue full."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                self._input.put(END_OF_INPUT, timeout=0.2)
                return
            except queue.Full:
                if self._stop.is_set() or (self._thread is not None
                                           and not self._thread.is_alive()):
                    return  # nobody will read it
                if deadline is not None and time.monotonic() > deadline:
                    raise

    def _next_frame(self, timeout: float = 0.05) -> QueuedFrame | EndOfInput | None:
        """The next frame, END_OF_INPUT, or None when none came within `timeout`."""
        try:
            return self._input.get(timeout=timeout)
        except queue.Empty:
            return None

