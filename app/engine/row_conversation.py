"""One conversation on the local engine: its row, from `open` to its end.

This is the `SpeechEngine` the session, the pipeline, the server and the evaluations drive
(speech_engine.py). It owns its input queue, its event queue, its span injector (reading
into its own row), its context ledger, its chunk limit and its figures; the engine's
thread reads its frames and runs them in the step it shares with the other rows.

Its row is held from `LocalEngine.open` until it ends: it leaves at the next frame boundary
after `stop` (or its input's end), and one stopped before it ever started gives its row back
at once, so a conversation that is dropped at any moment never keeps a row. A conversation
that owns its engine (the desktop's, `run`'s: `open_conversation`) starts it with its own
start and stops it with its own stop.
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

import numpy as np

from app.engine.context_ledger import ContextLedger
from app.engine.events import EngineEvent, SpanChunkInjected
from app.engine.frame_budget import AdaptiveChunkLimit, ChunkBudget
from app.engine.joining import PlannedStart
from app.engine.span_injector import SpanInjector
from app.engine.speech_engine import (
    ConversationStats,
    EngineFacts,
    EngineOptions,
    EngineStoppedError,
)
from app.frame_row import FrameRow, Host
from app.frames import FRAME_MS

if TYPE_CHECKING:
    from app.checkpoints.loader import LoadedCheckpoint
    from app.engine.columns import ColumnBook
    from app.engine.lm_runtime import LmRuntime
    from app.engine.span_text import SpanTokenizer


class RowEngine(Host, Protocol):
    """What a conversation asks of the engine it has a row on (local_engine.LocalEngine)."""

    checkpoint: LoadedCheckpoint
    runtime: LmRuntime
    book: ColumnBook
    dtype_label: str
    context_window: int
    max_chunk: int
    max_span_tokens: int
    blocks: bool

    def new_span_tokenizer(self) -> SpanTokenizer: ...

    def read_positions(self, row: int, token_ids: Sequence[int]) -> None: ...

    def read_block(self, row: int, token_ids: Sequence[int]) -> int: ...

WINDOW_FRAMES = 750  # the frame times kept for the figures: the last minute


class _RowReader:
    """The span injector's view of the engine: its conversation's row."""

    def __init__(self, engine: RowEngine, row: int) -> None:
        self._engine = engine
        self._row = row

    def read_positions(self, token_ids: Sequence[int]) -> None:
        self._engine.read_positions(self._row, token_ids)

    def can_read_block(self) -> bool:
        return self._engine.book.can_read_block(self._row)

    def read_block(self, token_ids: Sequence[int]) -> int:
        return self._engine.read_block(self._row, token_ids)

    def sync(self) -> None:
        self._engine.runtime.sync()


class _Figures:
    """Frames, late frames, frame time p50/p99, spans landed: written by the engine's
    thread, read from any (a lock guards the window)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._window: deque[float] = deque(maxlen=WINDOW_FRAMES)
        self.frames = 0
        self.late_frames = 0
        self.spans_landed = 0

    def frame(self, frame_ms: float) -> None:
        with self._lock:
            self._window.append(frame_ms)
            self.frames += 1
            self.late_frames += frame_ms > FRAME_MS

    def span_landed(self) -> None:
        with self._lock:
            self.spans_landed += 1

    def snapshot(self, row: int, dropped_frames: int) -> ConversationStats:
        with self._lock:
            times = np.asarray(self._window, dtype=np.float64)
            frames, late, spans = self.frames, self.late_frames, self.spans_landed
        p50 = float(np.percentile(times, 50)) if times.size else None
        p99 = float(np.percentile(times, 99)) if times.size else None
        return ConversationStats(row, frames, late, p50, p99, spans, dropped_frames)


class RowConversation(FrameRow[EngineEvent]):
    runs_once = "a conversation runs once; open a new one to start again"

    def __init__(self, engine: RowEngine, row: int, options: EngineOptions,
                 events: queue.SimpleQueue[EngineEvent] | None = None, owns_engine: bool = False
                 ) -> None:
        super().__init__(engine, row, options.input_queue_frames, owns_engine, events)
        # `ready`: its conversation start is in; frames are stepped.
        self.options = options
        self.frame_index = 0
        self._engine = engine
        self.ledger = ContextLedger(engine.context_window)
        self.span_tokenizer = engine.new_span_tokenizer()
        # A block is never split: its limit is the longest block, whatever the chunk limit.
        self._cap = (engine.max_chunk if engine.blocks
                     else min(engine.max_chunk, options.chunk_limit or engine.max_chunk))
        self.injector = SpanInjector(_RowReader(engine, row), self.span_tokenizer, self.ledger,
                                     self._cap, blocks=engine.blocks)
        self.adaptive: AdaptiveChunkLimit | None = None  # None: a fixed chunk limit
        self.counters = _Figures()
        # Its start, planned off the engine's thread before it joins (a many-row engine's
        # StartPlanner, joining.py); None: planned when it joins.
        self.planned: PlannedStart | None = None

    @property
    def checkpoint(self) -> LoadedCheckpoint:
        return self._engine.checkpoint

    @property
    def engine(self) -> RowEngine:
        return self._engine

    # ---- the SpeechEngine face (any thread) ----------------------------------------------

    def facts(self) -> EngineFacts:
        ck = self._engine.checkpoint
        manifest = ck.manifest
        return EngineFacts(
            model_id=manifest.id, display_name=manifest.display_name,
            device=self._engine.runtime.device_label, dtype=self._engine.dtype_label,
            context_window=self._engine.context_window,
            max_span_tokens=self._engine.max_span_tokens, retrieval=manifest.retrieval,
            user_name=self.options.user_name, user_city=self.options.user_city)

    @property
    def span_tokens(self) -> int:
        """The most content tokens one span carries: for blocks, what fits in the frame on
        this device, once the conversation is ready (0 before)."""
        return self.span_tokenizer.content_budget if self.ready.is_set() else 0

    def start(self) -> None:
        if self._leave.is_set() or self._ended.is_set():
            raise EngineStoppedError("the conversation was stopped before it started")
        super().start()

    def inject(self, text: str, source: str, at_frame: int = 0,
               origin_frame: int | None = None, deadline_frame: int | None = None) -> int:
        if self._gone:
            raise EngineStoppedError(
                f"the conversation has ended: the span from {source} was not injected")
        return self.injector.submit(text, source, not_before_frame=at_frame,
                                    origin_frame=origin_frame, deadline_frame=deadline_frame)

    def stats(self) -> ConversationStats:
        return self.counters.snapshot(self.row, self.dropped_frames)

    # ---- the engine's thread ---------------------------------------------------------------

    def fit_to_budget(self, budget: ChunkBudget | None) -> None:
        """Its limits from the budget the engine measured at warm-up (it may ask for less):
        the chunk limit, kept in line with the load from then on, and for blocks (never
        split) the longest span."""
        if budget is None:
            return
        engine = self._engine
        self.injector.chunk_limit = min(self._cap, budget.chunk_limit)
        self.adaptive = AdaptiveChunkLimit(budget, self._cap)
        if engine.blocks:
            self.span_tokenizer.fit_to_budget(budget.chunk_limit, engine.max_chunk)

    def before_frame(self) -> list[EngineEvent]:
        """Its span work before its next frame (at most one chunk, or one block); the events
        go out at once."""
        events = self.injector.before_frame(self.frame_index)
        for event in events:
            self.emit(event)
            if self.adaptive is not None and isinstance(event, SpanChunkInjected):
                self.adaptive.observe_chunk(event.k, event.prefill_ms)
        return events

    def after_frame(self, model_ms: float, blocks: bool) -> None:
        """The frame's model time (Mimi and the step) keeps the chunk limit in line."""
        if self.adaptive is not None and not blocks:
            self.adaptive.observe_frame(model_ms)
            self.injector.chunk_limit = self.adaptive.limit()
