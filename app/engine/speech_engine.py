"""What the rest of the app sees of a speech engine: one conversation's face.

The session, the pipeline, the orchestrator's assembly, the server and the evaluations
drive a conversation through `SpeechEngine` and nothing else: the local engine (one row of
app/engine/local_engine.py's engine: the desktop's one-row engine, or a server's N-row one)
and the engine on a server (app/remote/remote_engine.py) both are one. This module imports
no framework, so a client install without torch reads it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeVar

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from app.checkpoints.catalog import Retrieval
    from app.engine.frame_budget import BudgetTiming


@dataclass(frozen=True)
class EngineOptions:
    """One conversation's choices, and the engine-wide ones (sampling, seed, chunk limit,
    budget margin, warm-up), which a conversation on a shared engine cannot change."""

    seed: int | None = None
    greedy: bool = False
    chunk_limit: int | None = None  # None: measure what fits in the frame budget here
    budget_margin: float = 0.25  # share of the 80 ms frame kept free
    input_queue_frames: int = 25  # 2 s of audio
    voice: str | None = None  # persona checkpoints: voice prompt name (or a file)
    role: str | None = None  # persona checkpoints: persona text (None: the manifest's)
    user_name: str | None = None  # persona checkpoints trained on the user's name and city
    user_city: str | None = None
    warmup_frames: int = 4
    # A tick that takes longer than this is the engine's failure (a hung step: the
    # watchdog ends every conversation with the reason). None: 3 s on a GPU, 15 s elsewhere.
    stall_s: float | None = None
    batched_prefix: bool = True  # the start's forced frames in one forward (False: stepwise)
    # Frames at which the model's text is forced to its <ret> id (the forcing generator's
    # text forcing; the reference has the same switch, off by default): lets a model with
    # random weights, which never asks on its own, walk through the retrieval flow.
    forced_ret_frames: frozenset[int] = frozenset()
    # The MLX engine's Mimi: "mlx", "torch" or "auto" (MLX on Apple Silicon, torch on
    # other CPUs: app/engine/mlx/frame_codec.py). The torch engine always runs torch's.
    mimi: str = "auto"
    # A test hook on the frame budget measured at warm-up (frame_budget.BudgetTiming): the
    # timings to use instead of the measured ones; the forwards still run.
    budget_timing: BudgetTiming | None = None
    # The torch engine's step compiled by torch.compile (inductor) at warm-up, inside its
    # CUDA graph: fewer, bigger kernels (app/engine/step_compile.py). Off by default: a
    # first start compiles for a minute or more, and the compiled step has not yet been
    # run on a GPU (`--compile`; ARCHITECTURE.md).
    compile_step: bool = False
    # Hears what the warm-up does that takes a while (compiling the step): the desktop
    # shows it as the session's loading state; the engine's log has it either way.
    warmup_notice: Callable[[str], None] | None = None


@dataclass(frozen=True)
class EngineFacts:
    """What a conversation's engine is, for the status bar, the header and the LLM side."""

    model_id: str
    display_name: str
    device: str
    dtype: str
    context_window: int
    max_span_tokens: int  # the longest span the checkpoint takes, wrapping included
    retrieval: Retrieval | None  # how the model asks for information (None: not said)
    user_name: str | None  # who the model was told it talks to (the LLM's profile too)
    user_city: str | None


@dataclass(frozen=True)
class ConversationStats:
    """A conversation's figures (a server publishes them per slot)."""

    row: int
    frames: int
    late_frames: int  # frames whose tick took longer than one frame
    frame_ms_p50: float | None
    frame_ms_p99: float | None
    spans_landed: int
    dropped_frames: int


class EngineStoppedError(RuntimeError):
    """A span offered to a conversation that has ended."""


# What an engine says: the local engine its events (events.py), a server's engine those and
# its link's (app/remote/events.py). A caller names the most it will take: an engine that
# says less is one too (`SpeechEngine[ConversationEvent]` takes either).
Said = TypeVar("Said", covariant=True)


class SpeechEngine(Protocol[Said]):
    """One conversation on a speech engine. Every call is non-blocking but `stop`, `join`
    and `finish_input`, which wait at most their timeout."""

    def send_events_to(self, sink: Callable[[Said], None]) -> None:
        """Where its events go (the pipeline gives its router's queue before `start`);
        without one they wait in the engine's own queue."""
        ...

    @property
    def dropped_frames(self) -> int:
        """Frames of the user's audio a full queue refused."""
        ...

    @property
    def running(self) -> bool: ...

    @property
    def span_tokens(self) -> int:
        """The most content tokens one span carries, as measured once the conversation is
        ready (0 until then): the LLM is asked to answer within it."""
        ...

    def facts(self) -> EngineFacts: ...

    def start(self) -> None: ...

    def push_frame(self, pcm: npt.NDArray[np.float32], timeout: float | None = 0.0) -> bool:
        """Queue one 1920-sample frame. With timeout 0 (live audio) a full queue drops the
        frame and counts it; a file feeder passes a timeout and waits for room."""
        ...

    def finish_input(self, timeout: float | None = 10.0) -> None:
        """No more frames: the conversation ends once the queued ones are stepped."""
        ...

    def inject(self, text: str, source: str, at_frame: int = 0,
               origin_frame: int | None = None, deadline_frame: int | None = None) -> int:
        """Queue a span (never blocks); returns its id. `at_frame`: not before that frame.
        A span answering a <ret> names its frame and the last frame it may land before.
        Raises EngineStoppedError once the conversation has ended."""
        ...

    def stop(self, timeout: float = 10.0) -> bool:
        """End now (queued frames are dropped) and wait; True once it has ended."""
        ...

    def stats(self) -> ConversationStats: ...

