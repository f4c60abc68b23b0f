"""A file's run fed in lock-step: the replay's one object, made by the headless run only.

`python main.py run` and `eval` with an LLM side feed a file as fast as the stages take it
(docs/replay.md). Before frame i the feeder calls `wait_for_frame(i)`, which returns once
- the engine has output frame i - 1 and the pipeline's router passed it on,
- the recogniser has processed i frames,
- the orchestrator has handled every event routed before (a fence through the router's
  queue, then the orchestrator's own),
- and no LLM request in flight holds the conversation's clock before frame i (`clock`, the
  ReplayClock the orchestrator holds and releases).
The recogniser's events of a frame reach the orchestrator after the engine's: the router
holds them until the next fence, so a trigger is seen at the same frame, in the same order,
however fast the feeder and the engine run.

A live conversation (the desktop session, a server's slots, `run --realtime`) has none: its
pipeline routes each event as it comes, and nothing here runs on its path.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from app.conversation.events import ASR_EVENTS, ConversationEvent
from app.engine.events import AudioOut, EngineStopped
from app.orchestrator.replay_clock import ReplayClock

if TYPE_CHECKING:
    from app.conversation.pipeline import ConversationPipeline


class PipelineStalled(RuntimeError):
    """A stage did not get through a frame in time (replay feeding)."""


@dataclass(frozen=True)
class _Fence:
    """Put into the router's queue: set once the router, then the orchestrator, reached it."""

    passed: threading.Event


@dataclass(frozen=True)
class _EndOfInput:
    """Put into the router's queue: the feeder is done, the recogniser's last events go on
    as they come."""


_END_OF_INPUT = _EndOfInput()

# What the router's queue carries: the stages' events, and in a replay these marks.
RouterItem = ConversationEvent | _Fence | _EndOfInput
MARKS = (_Fence, _EndOfInput)


class LockStep:
    """The barrier between one run's feeder and its pipeline. `join` (the pipeline, once)
    gives it the router's queue and delivery; the router calls `route` for each event; the
    feeder calls `wait_for_frame` and `end_of_input`; the pipeline's `stop` calls `stop`."""

    def __init__(self, clock: ReplayClock | None = None) -> None:
        self.clock = clock if clock is not None else ReplayClock()
        self._pipeline: ConversationPipeline | None = None
        self._put: Callable[[RouterItem], None] = lambda _item: None
        self._deliver: Callable[[ConversationEvent], None] = lambda _event: None
        self._progress = threading.Condition()  # frames routed, the engine stopped, a stop
        self._frames_routed = 0
        self._engine_stopped = False
        self._stopped = False
        self._held: list[ConversationEvent] = []  # recogniser events until the next fence
        self._holding = True

    def join(self, pipeline: ConversationPipeline, put: Callable[[RouterItem], None],
             deliver: Callable[[ConversationEvent], None]) -> None:
        """The pipeline this run feeds: `put` puts into its router's queue, `deliver` hands
        an event on (to the orchestrator, the audio sink, `events`)."""
        self._pipeline, self._put, self._deliver = pipeline, put, deliver

    # ---- the router's thread ------------------------------------------------------------

    def route(self, event: RouterItem) -> None:
        """One event out of the router's queue: delivered, or held until the next fence."""
        if isinstance(event, MARKS):
            held, self._held = self._held, []
            for asr_event in held:
                self._deliver(asr_event)
            self._holding = self._holding and not isinstance(event, _EndOfInput)
            if isinstance(event, _Fence):  # everything before it is routed
                orchestrator = self._pipeline.orchestrator if self._pipeline else None
                if orchestrator is not None:
                    orchestrator.after_pending(event.passed.set)
                else:
                    event.passed.set()
            return
        if self._holding and isinstance(event, ASR_EVENTS):
            self._held.append(event)
            return
        self._deliver(event)
        if isinstance(event, (AudioOut, EngineStopped)):
            with self._progress:
                if isinstance(event, AudioOut):
                    self._frames_routed = event.frame_index + 1
                else:
                    self._engine_stopped = True
                self._progress.notify_all()

    # ---- the feeder's thread ------------------------------------------------------------

    def wait_for_frame(self, index: int, timeout: float) -> None:
        """The barrier before feeding frame `index` (see the module's docstring). Raises
        PipelineStalled when a stage takes longer than `timeout` (in all) or has stopped."""
        pipeline = self._pipeline
        if index <= 0 or pipeline is None:
            return
        deadline = time.monotonic() + timeout

        def left() -> float:
            return max(0.0, deadline - time.monotonic())

        with self._progress:
            self._progress.wait_for(lambda: self._frames_routed >= index or self._engine_stopped
                                    or self._stopped, left())
            routed, ended = self._frames_routed, self._engine_stopped or self._stopped
        if routed < index:
            why = "has stopped" if ended else f"did not give frame {index - 1} within {timeout:g} s"
            raise PipelineStalled(f"the engine {why}")
        if pipeline.asr is not None and not pipeline.asr.wait_frames(index, left()):
            raise PipelineStalled(f"the speech recognition did not get through frame "
                                  f"{index - 1} within {timeout:g} s (or has stopped)")
        if pipeline.orchestrator is None:
            return
        fence = _Fence(threading.Event())
        self._put(fence)
        while not fence.passed.wait(min(0.1, left())):  # woken each 0.1 s to see a stop
            if self._stopped or left() <= 0:
                raise PipelineStalled(f"the orchestrator did not handle frame {index - 1} "
                                      f"within {timeout:g} s (or has stopped)")
        if not self.clock.wait_until_feedable(index, left()):
            raise PipelineStalled(f"an LLM request held the conversation before frame {index} "
                                  f"for more than {timeout:g} s")

    def end_of_input(self) -> None:
        """No more frames: what the router holds goes on, and what comes after at once."""
        self._put(_END_OF_INPUT)

    # ---- any thread ---------------------------------------------------------------------

    def stop(self) -> None:
        """The pipeline stops: a feeder waiting here is let go."""
        with self._progress:
            self._stopped = True
            self._progress.notify_all()
