"""What one headless run is asked to do, beside the conversation it runs: its input and
outputs, the spans it injects, and the engine's knobs that belong to this run (seed, chunk
limit, forced <ret>s). `run`, `eval` and the benchmarks hand `run_headless` a
ConversationConfig (what the conversation is) and one HeadlessRun (what this run does)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app.conversation.headless import Injection
    from app.engine.row_conversation import RowConversation

RUN_TIMEOUT_S = 3600.0  # the longest a run may take, its engine's start included


@dataclass(frozen=True)
class HeadlessRun:
    input_path: Path  # audio file (any rate, channels); its name heads the transcript
    output_path: Path  # the reply, 24 kHz WAV
    transcript_path: Path  # the JSONL transcript
    injections: tuple[Injection, ...] = ()  # spans injected at their times (`run --inject`)
    seed: int | None = None
    chunk_limit: int | None = None  # most span positions a frame; None: measured
    ret_at: tuple[float, ...] = ()  # force the model's <ret> at these seconds
    mimi: str = "auto"  # with the MLX engine: its codec's framework (auto, mlx, torch)
    timeout_s: float = RUN_TIMEOUT_S
    # Sees the engine before it starts (instrumentation: tests, benchmarks).
    engine_hook: Callable[[RowConversation], None] | None = None
