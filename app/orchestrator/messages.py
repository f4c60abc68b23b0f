"""What goes into the orchestrator's inbox: one named, frozen type per kind of message.

Any thread may post these (the pipeline's router, the session, an LLM turn's worker); the
control thread alone reads them, one at a time, and hands each to the one handler of its
type (`Orchestrator._handle`). Nothing in them is changed after posting.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from app.asr.events import AsrEvent
from app.cuts import Cut
from app.engine.events import EngineEvent
from app.llm.backend import LLMBackend, LLMError
from app.orchestrator.events import ToolCalled
from app.tools.base import ToolRegistry


@dataclass(frozen=True)
class Received:
    """An event of the recogniser or the engine, with the orchestrator's clock when it was
    handed over (a turn's latency counts from there)."""

    event: AsrEvent | EngineEvent
    at: float


@dataclass(frozen=True)
class FrameMade:
    """The engine made frame `frame_index` (its AudioOut went out): the conversation's clock.
    The audio itself never enters the inbox."""

    frame_index: int


@dataclass(frozen=True)
class Typed:
    """A typed question; `at`: when it was posted (its turn's "end of speech")."""

    text: str
    at: float


@dataclass(frozen=True)
class Cancel:
    """The user's cancel (Esc, the Cancel button, Stop)."""

    reason: str


@dataclass(frozen=True)
class Configure:
    """New settings: the next turn asks `backend` with `tools`."""

    backend: LLMBackend
    tools: ToolRegistry


@dataclass(frozen=True)
class Fence:
    """Call `callback` once everything posted before it has been handled (the replay
    feeder's barrier); answers due by the next frame are settled first."""

    callback: Callable[[], None]


@dataclass(frozen=True)
class Stop:
    """The control thread ends once it reads this."""


@dataclass(frozen=True)
class TurnAnswer:
    """An LLM turn's worker is done: the text to inject ("" for none)."""

    turn_id: int
    text: str
    tools: tuple[str, ...]
    first_token: float | None
    no_information: bool = False
    arrival_frame: int | None = None  # replay: the frame it would have reached in real time
    posted_at: float = 0.0  # the orchestrator's clock when it was posted (span ready)
    cuts: tuple[Cut, ...] = ()  # what was cut from the reply (or a tool's) to make `text`
    # The latency its LLM's server scripted (the stand-in's), tools' time included; None: a
    # real LLM, whose latency a replay measures (replay_clock.py).
    declared_s: float | None = None


@dataclass(frozen=True)
class ToolWait:
    """A turn's tool waits for the user (an MCP tool asking permission): the voice is told
    so by a short span, and a <ret>'s deadline no longer holds for that turn."""

    turn_id: int
    tool: str  # the name the LLM called it by
    server: str
    text: str  # what the voice is told


@dataclass(frozen=True)
class ToolDone:
    """A turn's tool call is done: its event goes out from the control thread, so after
    anything the call posted before (its wait for the user's permission, `ToolWait`)."""

    event: ToolCalled


@dataclass(frozen=True)
class TurnError:
    """An LLM turn's worker failed (or was cancelled)."""

    turn_id: int
    error: LLMError
    arrival_frame: int | None = None
    posted_at: float = 0.0


InboxMessage = (Received | FrameMade | Typed | Cancel | Configure | Fence | Stop | TurnAnswer
                | TurnError | ToolWait | ToolDone)
