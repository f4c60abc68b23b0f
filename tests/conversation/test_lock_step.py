"""The replay's barrier (app/conversation/lock_step.py) on its own: a router thread of the
test's routes what the LockStep puts and what the "stages" send, as the pipeline's does.
The whole replay (engine, recogniser, orchestrator, the stand-in LLM) is in
tests/cli/test_ret_flow.py; this checks the barrier's own rules, each of which a run only
shows by luck of timing."""

from __future__ import annotations

import queue
import threading
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from app.asr.events import AsrWord
from app.conversation.lock_step import LockStep, PipelineStalled
from app.engine.events import AudioOut, EngineStopped, TextPiece
from app.frames import FRAME_SAMPLES
from tests.waiting import wait_until


class _Orchestrator:
    """What the barrier asks of the orchestrator: call back once what came before is
    handled (here: at once, on the router's thread, after what was delivered)."""

    def __init__(self, delivered: list[object]) -> None:
        self.delivered = delivered
        self.fences = 0

    def after_pending(self, callback: Any) -> None:
        self.fences += 1
        callback()


class _Router:
    """The pipeline's router: one queue, one thread, every item through `route`."""

    def __init__(self, with_orchestrator: bool = True) -> None:
        self.delivered: list[object] = []
        self.items: queue.SimpleQueue[object] = queue.SimpleQueue()
        self.orchestrator = _Orchestrator(self.delivered) if with_orchestrator else None
        self.lock_step = LockStep()
        pipeline = SimpleNamespace(asr=None, orchestrator=self.orchestrator)
        self.lock_step.join(pipeline, self.items.put, self.delivered.append)  # type: ignore[arg-type]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                item = self.items.get(timeout=0.05)
            except queue.Empty:
                continue
            self.lock_step.route(item)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)


def _frame(index: int) -> AudioOut:
    return AudioOut(index, np.zeros(FRAME_SAMPLES, dtype=np.float32))


@pytest.fixture
def router():
    router = _Router()
    yield router
    router.close()


def test_the_recognisers_events_reach_the_orchestrator_after_the_engines_of_their_frame(router):
    word = AsrWord("hello", 0.0, 0.08)
    router.items.put(word)  # the recogniser was quicker than the engine this time
    router.items.put(TextPiece(0, " Hi", 17))
    router.items.put(_frame(0))
    router.lock_step.wait_for_frame(1, 30.0)  # the barrier before frame 1
    # The word was held until the barrier's fence, then handed on.
    assert [type(e) for e in router.delivered] == [TextPiece, AudioOut, AsrWord]
    assert router.delivered[2] is word
    assert router.orchestrator is not None and router.orchestrator.fences == 1


def test_after_the_end_of_input_nothing_is_held(router):
    first, last = AsrWord("one", 0.0, 0.1), AsrWord("two", 0.1, 0.2)
    router.items.put(first)
    router.lock_step.end_of_input()
    router.items.put(last)
    router.items.put(EngineStopped(0, "end"))
    wait_until(lambda: len(router.delivered) == 3, 30.0)
    assert router.delivered[:2] == [first, last]  # the first was released, the last not held


def test_the_barrier_waits_for_the_engines_frame_and_says_which_it_did_not_get(router):
    router.items.put(_frame(0))
    router.lock_step.wait_for_frame(1, 30.0)  # frame 0 is out: at once
    with pytest.raises(PipelineStalled, match="did not give frame 1"):
        router.lock_step.wait_for_frame(2, 0.05)  # nothing will give frame 1


def test_a_stop_lets_a_waiting_feeder_go():
    router = _Router(with_orchestrator=False)
    raised: list[BaseException] = []

    def feed() -> None:
        try:
            router.lock_step.wait_for_frame(5, 300.0)
        except PipelineStalled as exc:
            raised.append(exc)

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    router.lock_step.stop()
    feeder.join(30.0)
    router.close()
    assert not feeder.is_alive()
    assert raised and "has stopped" in str(raised[0])


def test_an_engine_that_stopped_ends_the_wait(router):
    router.items.put(EngineStopped(0, "error"))
    with pytest.raises(PipelineStalled, match="has stopped"):
        router.lock_step.wait_for_frame(3, 60.0)
