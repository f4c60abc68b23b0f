"""The end of a file's input reaches a worker that is slow to start, however long it takes,
and never blocks on a worker that is gone."""

from __future__ import annotations

import queue
import threading

import numpy as np
import pytest

from app.frame_worker import END_OF_INPUT, FrameWorker
from app.frames import FRAME_SAMPLES


class SlowStarter(FrameWorker):
    def __init__(self, start_after: threading.Event, dies: bool = False) -> None:
        super().__init__(queue_frames=2, thread_name="slow-starter")
        self.start_after, self.dies, self.frames, self.ended = start_after, dies, 0, False

    def _run(self) -> None:
        self.start_after.wait(30)
        if self.dies:
            return
        while (item := self._next_frame()) is not END_OF_INPUT:
            self.frames += item is not None
        self.ended = True


def _fill(worker: FrameWorker) -> None:
    frame = np.zeros(FRAME_SAMPLES, np.float32)
    assert worker.push_frame(frame, 1.0) and worker.push_frame(frame, 1.0)


def test_the_end_of_input_waits_while_the_worker_is_still_starting():
    go = threading.Event()
    worker = SlowStarter(go)
    worker.start()
    _fill(worker)  # the queue is full until the worker starts reading
    threading.Timer(0.5, go.set).start()
    worker.finish_input(None)  # a file: as long as it takes (a 7B warm-up takes minutes)
    assert worker.join(10) and worker.ended and worker.frames == 2


def test_a_timeout_passes_only_while_the_worker_lives_and_a_dead_one_is_not_waited_for():
    go = threading.Event()
    worker = SlowStarter(go)
    worker.start()
    _fill(worker)
    with pytest.raises(queue.Full):
        worker.finish_input(0.3)
    gone = SlowStarter(go, dies=True)
    gone.start()
    _fill(gone)
    go.set()
    assert gone.join(10)
    gone.finish_input(None)  # nobody will read it: returns instead of waiting forever
