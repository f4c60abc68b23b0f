"""The replay clock: the conversation's time when a file is fed faster than real time.

`python main.py run` and `eval` feed a file as fast as the engine takes it, in lock-step
(the barrier before each frame, app/conversation/lock_step.py, which owns this clock).
With an LLM side, a request's latency is replayed as frames: the answer lands at the frame
it would have reached in real time, so the transcript is the same on a slow laptop and a
fast GPU. This object is that
time, and only a run fed from a file makes one: a live conversation (the desktop session, a
server's slots) has a `LiveClock` instead (live_clock.py: it holds nothing), and its frames
come at a microphone's pace.

How it holds the conversation (one `_Hold` per LLM request in flight):
- a request starts (`hold`): the feeder may feed up to the frame it was asked at, no
  further, until the answer is back;
- the answer is back (`answered`): it lands `max(1, ceil(latency / 80 ms))` frames after
  the frame it was asked at, and the feeder may feed up to the frame before; the
  orchestrator settles it at the barrier before that frame (`due`) and injects it there;
- it is settled, cancelled or failed (`release`): the clock goes on.

The latency is the one the LLM's server declares when it scripts its time (the stand-in
Ollama's `first_token_delay_s` and `chunk_delay_s`, app/llm/ollama_standin.py), plus the
tools' own time: the same script gives the same frames however busy the machine is. A real
LLM declares nothing: its measured wall time is replayed, measured while the engine waits
(the conversation does not advance during the request), so the engine's own work never
stretches it.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from app.frames import FRAME_S
from app.orchestrator.messages import TurnAnswer, TurnError

Result = TurnAnswer | TurnError


@dataclass
class _Hold:
    asked_frame: int  # the newest frame the engine had produced when it was asked
    started: float  # clock time it was asked (a real LLM's latency counts from here)
    frozen: int | None = None  # the answer is back: the last frame before it lands


def frames_of_latency(seconds: float) -> int:
    """Frames an answer takes to reach the conversation: at least the next one."""
    return max(1, math.ceil(seconds / FRAME_S - 1e-9))


class ReplayClock:
    """Lock-step time for one run. The orchestrator's control thread calls `hold`,
    `release`, `defer` and `due`; its LLM workers call `answered`; the feeder's thread calls
    `wait_until_feedable`; anyone calls `stop`."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._holds: dict[int, _Hold] = {}  # turn id -> its request's hold
        self._changed = threading.Condition()
        self._due: list[Result] = []  # answers whose frame is not reached yet
        self._fenced = 0  # every event of the frames before this one is handled

    # ---- the orchestrator's control thread --------------------------------------------

    def hold(self, turn_id: int, asked_frame: int) -> None:
        """`turn_id`'s request is about to start at `asked_frame`: the clock stops there."""
        with self._changed:
            self._holds[turn_id] = _Hold(asked_frame, self._clock())

    def release(self, turn_id: int) -> None:
        """`turn_id`'s answer is settled (or the turn was cancelled): the clock goes on."""
        with self._changed:
            if self._holds.pop(turn_id, None) is not None:
                self._changed.notify_all()

    def defer(self, result: Result) -> bool:
        """True: `result` arrives at a frame not reached yet, and is kept until `due` gives
        it back; False: settle it now."""
        if result.arrival_frame is None or result.arrival_frame <= self._fenced:
            return False
        self._due.append(result)
        return True

    def due(self, newest_frame: int) -> list[Result]:
        """The barrier before frame `newest_frame + 1`: the answers that land by then, in
        the order they came back (the rest stay deferred)."""
        self._fenced = newest_frame + 1
        ready = [r for r in self._due if (r.arrival_frame or 0) <= self._fenced]
        self._due = [r for r in self._due if r not in ready]
        return ready

    # ---- an LLM worker ----------------------------------------------------------------

    def answered(self, turn_id: int, declared_s: float | None) -> int | None:
        """`turn_id`'s request is back: the frame its answer lands before (None: it held no
        clock). `declared_s`: the latency its server scripted (None: measure it)."""
        with self._changed:
            hold = self._holds.get(turn_id)
            if hold is None:
                return None
            latency = (max(0.0, self._clock() - hold.started) if declared_s is None
                       else declared_s)
            arrival = hold.asked_frame + frames_of_latency(latency)
            hold.frozen = arrival - 1
            self._changed.notify_all()
            return arrival

    # ---- the feeder -------------------------------------------------------------------

    def limit(self) -> int | None:
        """The last frame the feeder may feed; None when no request holds the clock."""
        with self._changed:
            return self._limit_locked()

    def _limit_locked(self) -> int | None:
        if not self._holds:
            return None
        return min(h.asked_frame if h.frozen is None else h.frozen
                   for h in self._holds.values())

    def wait_until_feedable(self, frame: int, timeout: float) -> bool:
        """Block until `frame` may be fed (False when `timeout` passed first)."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                limit = self._limit_locked()
                if limit is None or frame <= limit:
                    return True
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._changed.wait(min(remaining, 1.0))  # each change notifies

    def stop(self) -> None:
        """The conversation ends: a feeder waiting on the clock is let go."""
        with self._changed:
            self._holds.clear()
            self._changed.notify_all()
