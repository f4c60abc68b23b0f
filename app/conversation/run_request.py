"""What one headless run is asked to do, beside the conversation it runs: its input and
outputs, the spans it injects, and the engine's knobs that belong to this run (seed, chunk
limit, forced <ret>s). `run`, `eval` and the benchmarks hand `run_headless` a
ConversationConfig (what the conversation is) and one HeadlessRun (what this run does).
`run`'s flags for them are declared on the fields (app/command_options.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from app.command_options import cli_option

if TYPE_CHECKING:
    from app.conversation.headless import Injection
    from app.engine.row_conversation import RowConversation

RUN_TIMEOUT_S = 3600.0  # the longest a run may take, its engine's start included


@dataclass(frozen=True)
class HeadlessRun:
    # audio file (any rate, channels); its name heads the transcript
    input_path: Path = field(metadata=cli_option(
        "--input", required=True, help="audio file (any rate, channels)"))
    output_path: Path = field(metadata=cli_option(  # the reply, 24 kHz WAV
        "--output", required=True, help="reply audio, 24 kHz WAV"))
    transcript_path: Path = field(metadata=cli_option(  # the JSONL transcript
        "--transcript", required=True, help="JSONL transcript"))
    # spans injected at their times (`run --inject TEXT --at SECONDS`: two flags, one field)
    injections: tuple[Injection, ...] = ()
    seed: int | None = field(default=None, metadata=cli_option("--seed"))
    chunk_limit: int | None = field(default=None, metadata=cli_option(  # None: measured
        "--chunk-limit", help="most positions per frame (default: measured on this device)"))
    ret_at: tuple[float, ...] = field(default=(), metadata=cli_option(
        "--ret-at", kind="list", metavar="SECONDS",
        help="force the model's <ret> at this time (repeatable): models with random weights "
             "never ask on their own (context-spanning-7b, tiny-cs)"))
    # with the MLX engine: its codec's framework (auto, mlx, torch)
    mimi: str = field(default="auto", metadata=cli_option(
        "--mimi", choices=("auto", "mlx", "torch"),
        help="with --device mlx: the audio codec's framework (default: mlx on Apple Silicon, "
             "torch on other CPUs, where it is the faster)"))
    timeout_s: float = RUN_TIMEOUT_S
    # Sees the engine before it starts (instrumentation: tests, benchmarks).
    engine_hook: Callable[[RowConversation], None] | None = None
