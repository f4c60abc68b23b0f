"""The clock a live conversation's answers keep: none. Every question it is asked says "now".

The orchestrator asks a clock about each LLM request: hold the conversation where it was
asked, say at which frame the answer lands, keep the answer until that frame. A file fed
faster than real time gives it a `ReplayClock` (replay_clock.py), which does all that. A
live conversation (the desktop session, a server's slots, `run --realtime`) has its frames
at a microphone's pace and its answers land as they come: `LiveClock` is its clock, and
does nothing, so the orchestrator asks the same questions either way and never asks which
clock it has.
"""

from __future__ import annotations

from typing import Protocol

from app.orchestrator.messages import TurnAnswer, TurnError

Result = TurnAnswer | TurnError


class AnswerClock(Protocol):
    """What the orchestrator asks of the conversation's clock (replay_clock.py says what
    each call means when a file is replayed). Its control thread calls `hold`, `release`,
    `defer` and `due`; its LLM workers call `answered`; `stop` is called when it stops."""

    def hold(self, turn_id: int, asked_frame: int) -> None: ...

    def release(self, turn_id: int) -> None: ...

    def defer(self, result: Result) -> bool: ...

    def due(self, newest_frame: int) -> list[Result]: ...

    def answered(self, turn_id: int, declared_s: float | None) -> int | None: ...

    def stop(self) -> None: ...


class LiveClock:
    """A live conversation's: nothing is held, every answer is settled when it comes."""

    def hold(self, turn_id: int, asked_frame: int) -> None:
        """Nothing holds a live conversation: its frames come whatever the LLM does."""

    def release(self, turn_id: int) -> None:
        """Nothing was held."""

    def defer(self, result: Result) -> bool:
        return False  # settled now

    def due(self, newest_frame: int) -> list[Result]:
        return []  # nothing was deferred

    def answered(self, turn_id: int, declared_s: float | None) -> int | None:
        return None  # it lands when it came, at no frame of its own

    def stop(self) -> None:
        """No feeder waits on it."""
