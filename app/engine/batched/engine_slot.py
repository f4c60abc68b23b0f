"""One conversation in a BatchedEngine, with the face of a DuplexEngine.

A ConversationPipeline (or the server) takes a slot where it would take a DuplexEngine:
`start`, `push_frame`, `finish_input`, `stop`, `inject`, `events`, `running`, `options`,
`dropped_frames`. The slot owns its input queue, its event queue, its span injector (over
its own row) and its context ledger; the engine thread reads its frames
and runs them in the batched step. `stop` leaves the engine (the row is freed at the next
frame boundary); it never stops the engine or another slot.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, cast

import numpy as np
import torch

from app.engine.batched.row_generator import RowGenerator
from app.engine.batched.slot_stats import SlotCounters, SlotStats
from app.engine.context_ledger import ContextLedger
from app.engine.duplex_engine import EngineOptions, EngineStoppedError
from app.engine.events import EngineEvent
from app.engine.span_injector import PrefillTarget, SpanInjector
from app.engine.span_text import SpanTokenizer
from app.frame_worker import END_OF_INPUT
from app.frames import FRAME_SAMPLES

if TYPE_CHECKING:
    from app.engine.batched.batched_engine import BatchedEngine


class _RowTarget:
    """The span injector's view of the generator: one row of it."""

    def __init__(self, gen: RowGenerator, row: int) -> None:
        self.gen = gen
        self.row = row
        self.lm_model = gen.lm_model

    def can_inject_block(self) -> bool:
        return self.gen.can_inject_block(self.row)

    def inject_block(self, block: torch.Tensor) -> int:
        return self.gen.inject_block(self.row, block)


class RowSpanInjector(SpanInjector):
    """The span injector, reading every span into its slot's row alone."""

    def __init__(self, target: _RowTarget, span_tokenizer: SpanTokenizer, ledger: ContextLedger,
                 chunk_limit: int,
                 block_columns: Callable[[Sequence[int]], torch.Tensor] | None = None) -> None:
        self._target = target
        # The row target has what the injector reads (lm_model, the block reader's calls).
        super().__init__(cast(PrefillTarget, target), span_tokenizer, ledger, chunk_limit,
                         block_columns=block_columns)

    def _position_forwards(self, lm_gen: PrefillTarget) -> None:
        return None

    def _read_positions(self, token_ids: Sequence[int]) -> None:
        self._target.gen.prefill_positions(self._target.row, token_ids)


class EngineSlot:
    def __init__(self, engine: BatchedEngine, row: int, options: EngineOptions,
                 events: queue.SimpleQueue[EngineEvent] | None = None) -> None:
        self.options = options
        self.row = row
        self.events: queue.SimpleQueue[EngineEvent] = events or queue.SimpleQueue()
        self.dropped_frames = 0
        self.frame_index = 0
        self.ready = threading.Event()  # its conversation start is in; frames are stepped
        self._engine = engine
        self._input: queue.Queue[object] = queue.Queue(options.input_queue_frames)
        self._started = False
        self._leave = threading.Event()  # asked to leave
        self._ended = threading.Event()  # left: the row is free
        self.ledger = ContextLedger(engine.context_window)
        self.span_tokenizer = engine.new_span_tokenizer()
        chunk_limit = min(engine.max_chunk, options.chunk_limit or engine.max_chunk)
        self.injector = RowSpanInjector(
            _RowTarget(engine.gen, row), self.span_tokenizer, self.ledger, chunk_limit,
            block_columns=engine.block_columns if engine.blocks else None)
        self.counters = SlotCounters()

    # ---- the DuplexEngine face (any thread) ----------------------------------------------

    def start(self) -> None:
        if self._started:
            raise RuntimeError("a slot runs once; open a new one to start again")
        self._started = True
        self._engine.request_join(self)

    def push_frame(self, pcm: np.ndarray, timeout: float | None = 0.0) -> bool:
        """Queue one 1920-sample frame. With timeout 0 (live audio) a full queue drops the
        frame and counts it; a file feeder passes a timeout and waits for room."""
        if pcm.shape != (FRAME_SAMPLES,):
            raise ValueError(f"a frame is {FRAME_SAMPLES} samples, got shape {pcm.shape}")
        frame = np.asarray(pcm, dtype=np.float32)
        try:
            if timeout == 0:
                self._input.put_nowait(frame)
            else:
                self._input.put(frame, timeout=timeout)
        except queue.Full:
            self.dropped_frames += 1
            return False
        self._engine.wake()
        return True

    def finish_input(self, timeout: float | None = 10.0) -> None:
        """No more frames: the slot leaves once its queued frames are stepped."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                self._input.put(END_OF_INPUT, timeout=0.2)
                self._engine.wake()
                return
            except queue.Full:
                if self._leave.is_set() or self._ended.is_set():
                    return  # nobody will read it
                if deadline is not None and time.monotonic() > deadline:
                    raise

    def stop(self, timeout: float = 10.0) -> bool:
        """Leave now (queued frames are dropped) and wait. True once the row is free."""
        self._leave.set()
        self._engine.request_leave(self)
        return self.join(timeout)

    def join(self, timeout: float = 10.0) -> bool:
        if not self._started and not self._leave.is_set():
            return True
        return self._ended.wait(timeout)

    @property
    def running(self) -> bool:
        return self._started and not self._ended.is_set()

    def inject(self, text: str, source: str, at_frame: int = 0,
               origin_frame: int | None = None, deadline_frame: int | None = None) -> int:
        """Queue a span for this conversation (never blocks), as DuplexEngine.inject."""
        if self._leave.is_set() or self._ended.is_set():
            raise EngineStoppedError(
                f"the conversation has ended: the span from {source} was not injected")
        return self.injector.submit(text, source, not_before_frame=at_frame,
                                    origin_frame=origin_frame, deadline_frame=deadline_frame)

    def stats(self) -> SlotStats:
        return self.counters.snapshot(self.row, self.dropped_frames)

    # ---- the engine thread ---------------------------------------------------------------

    @property
    def leaving(self) -> bool:
        return self._leave.is_set()

    def next_item(self) -> object | None:
        """The next frame or END_OF_INPUT, or None when none is queued."""
        try:
            return self._input.get_nowait()
        except queue.Empty:
            return None

    def emit(self, event: EngineEvent) -> None:
        self.events.put(event)

    def ended(self) -> None:
        self._ended.set()
