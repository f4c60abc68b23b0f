"""What the orchestrator reports to the transcript and the status bar."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

LlmState = Literal["idle", "thinking", "error"]


@dataclass(frozen=True)
class LlmStatus:
    state: LlmState
    message: str  # one line for the status bar


@dataclass(frozen=True)
class TurnStarted:
    turn_id: int
    question: str
    trigger: str  # "end_of_turn", "mid_turn" or "typed"


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


@dataclass(frozen=True)
class SpanQueued:
    turn_id: int
    span_id: int
    text: str
    source: str  # e.g. "llm", "llm+web_search"


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
    LlmStatus | TurnStarted | ToolCalled | SpanQueued | TurnCancelled | TurnFailed | TurnLatency
)
