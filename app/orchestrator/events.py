"""What the orchestrator reports to the transcript and the status bar."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from app.cuts import Cut

LlmState = Literal["idle", "thinking", "error"]


@dataclass(frozen=True)
class LlmStatus:
    state: LlmState
    message: str  # one line for the status bar


@dataclass(frozen=True)
class TurnStarted:
    turn_id: int
    question: str
    trigger: str  # "end_of_turn", "mid_turn", "typed" or "ret" (the model's own <ret>)


@dataclass(frozen=True)
class RetrievalQuestion:
    """The model emitted <ret>: the question sent to the LLM, and how it was taken."""

    turn_id: int
    ret_frame: int
    question: str  # "" when nothing was heard (then nothing is asked)
    plan: str  # "cache", "wait" (then the final or the window) or "window"
    waited_ms: float  # conversation time from <ret> until the question was settled


@dataclass(frozen=True)
class RetrievalIgnored:
    ret_frame: int
    reason: str


@dataclass(frozen=True)
class NoSpan:
    """A <ret> that gets no span: nothing heard, the LLM found nothing, or a tool failed."""

    turn_id: int
    ret_frame: int
    question: str
    reason: str


@dataclass(frozen=True)
class RetrievalLate:
    """The LLM's answer came after the <ret> deadline: dropped, nothing injected."""

    turn_id: int
    ret_frame: int
    question: str
    seconds: float  # from <ret> to the answer, conversation time
    source: str
    text: str = ""  # the answer that was dropped


@dataclass(frozen=True)
class ToolCalled:
    turn_id: int
    tool: str
    arguments: Mapping[str, Any]
    ok: bool
    error: str | None
    source: str
    chars: int  # size of the (limited) result handed back to the LLM
    truncated: bool
    cuts: tuple[Cut, ...] = ()  # what the tool's and the registry's bounds took out
    server: str = ""  # an MCP server's tool: which server ("" for a built-in tool)
    server_tool: str = ""  # and the server's own name for the tool
    result: str = ""  # what the LLM was handed back (untrusted text, already limited)
    elapsed_ms: float | None = None  # how long the call took


@dataclass(frozen=True)
class ToolWaiting:
    """A tool waits for the user's permission (an MCP tool that changes things): the voice
    was told to wait with the span `span_id` (None: the engine refused it)."""

    turn_id: int
    tool: str
    server: str
    text: str
    span_id: int | None


@dataclass(frozen=True)
class SpanQueued:
    turn_id: int
    span_id: int
    text: str
    source: str  # e.g. "llm", "llm+web_search"
    cuts: tuple[Cut, ...] = ()  # what was cut from the LLM's reply (or a tool's) to make it


@dataclass(frozen=True)
class AnswerNotInjected:
    """The LLM answered, but the engine refused the span at once (the conversation was
    ending): the answer is still shown, with why it never reached the model."""

    turn_id: int
    text: str
    source: str
    reason: str
    cuts: tuple[Cut, ...] = ()


@dataclass(frozen=True)
class TurnCancelled:
    turn_id: int
    reason: str


@dataclass(frozen=True)
class TurnFailed:
    turn_id: int
    kind: str
    message: str


@dataclass(frozen=True)
class TurnLatency:
    """Per-stage latency of one turn, in milliseconds (None where a stage did not happen)."""

    turn_id: int
    end_of_speech_to_turn_ms: float | None  # end-of-turn detection (VAD hang, STT head)
    turn_to_first_token_ms: float | None
    first_token_to_span_ready_ms: float | None  # the rest of the LLM reply and its tools
    span_ready_to_injected_ms: float | None  # waiting for the engine: target <= 80 ms
    injected_to_first_audio_ms: float | None
    end_of_speech_to_first_audio_ms: float | None


OrchestratorEvent = (
    LlmStatus | TurnStarted | ToolCalled | SpanQueued | AnswerNotInjected | TurnCancelled
    | TurnFailed | TurnLatency | RetrievalQuestion | RetrievalIgnored | NoSpan | RetrievalLate
    | ToolWaiting
)
