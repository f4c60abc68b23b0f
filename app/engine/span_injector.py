"""The span injector: Context Spanning's real-time chunked prefill.

Between two frames, on the engine thread, a span's tokens go into the temporal transformer
in ONE forward pass, in the form the checkpoint's manifest names (`span_placement`):

- "positions" (vanilla Moshi): text ids in stream 0 and the zero token (-1, which embeds to
  an exact zero vector) in the 16 audio streams. Only the transformer's streaming state
  advances (RoPE offsets, KV rings); the generator's own frame bookkeeping (its offsets,
  token ring and acoustic delays) is left alone. A span longer than what fits in the frame
  budget is split across frames.
- "block" (checkpoints trained on span blocks): the block columns of span_block.py, read by
  the forcing generator after its pending column, never split (as trained and as the
  reference runs it); at most one block goes in between two frames.

A span that answers the model's own <ret> carries a deadline frame: reaching the frame loop
later than that, it is dropped with a `SpanLate` event (the checkpoint never saw answers
that late in training).
"""

from __future__ import annotations

import itertools
import queue
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from app.cuts import Cut
from app.engine.context_ledger import ContextLedger
from app.engine.events import (
    EngineEvent,
    SpanAccepted,
    SpanChunkInjected,
    SpanInjected,
    SpanLate,
    SpanRejected,
)
from app.engine.span_text import SpanTokenizer, SpanTokens
from app.frames import FRAME_S


class SpanReader(Protocol):
    """What the injector asks of its conversation's row of the engine."""

    def read_positions(self, token_ids: Sequence[int]) -> None:
        """The ids as positions (text in stream 0, the zero token elsewhere), one forward."""
        ...

    def can_read_block(self) -> bool:
        """A block can go in now (the row has returned its first frame)."""
        ...

    def read_block(self, token_ids: Sequence[int]) -> int:
        """The ids as a span block after the pending column, one forward; returns n."""
        ...

    def sync(self) -> None: ...


@dataclass(frozen=True)
class _PreparedSpan:
    span_id: int
    text: str
    source: str
    content: tuple[int, ...]  # every content id: cut to the budget when it goes in
    not_before_frame: int
    origin_frame: int | None = None  # the <ret> frame it answers
    deadline_frame: int | None = None  # dropped if it would land after this frame


class _ActiveSpan:
    def __init__(self, span: _PreparedSpan, tokens: SpanTokens) -> None:
        self.span = span
        self.tokens = tokens
        self.cursor = 0
        self.chunks = 0
        self.first_frame = -1


class SpanQueueFullError(RuntimeError):
    pass


class SpanInjector:
    """Accepts spans from any thread; injects them, chunk by chunk, on the engine thread."""

    MAX_QUEUED_SPANS = 64

    def __init__(self, reader: SpanReader, span_tokenizer: SpanTokenizer,
                 ledger: ContextLedger, chunk_limit: int, blocks: bool) -> None:
        """`blocks`: spans go in as span blocks, never split; else as positions, in chunks of
        at most `chunk_limit`."""
        self._reader = reader
        self.span_tokenizer = span_tokenizer
        self._ledger = ledger
        self.chunk_limit = max(1, chunk_limit)
        self._blocks = blocks
        self.last_block: tuple[int, int, float] | None = None  # (span id, n, prefill ms)
        self._incoming: queue.Queue[_PreparedSpan] = queue.Queue(self.MAX_QUEUED_SPANS)
        self._waiting: list[_PreparedSpan] = []
        self._active: _ActiveSpan | None = None
        self._ids = itertools.count(1)
        self._id_lock = threading.Lock()

    @property
    def blocks(self) -> bool:
        return self._blocks

    def pending_count(self) -> int:
        """Spans accepted and not yet injected or dropped (any thread; approximate)."""
        return self._incoming.qsize() + len(self._waiting) + (self._active is not None)

    def submit(self, text: str, source: str, not_before_frame: int = 0,
               origin_frame: int | None = None, deadline_frame: int | None = None) -> int:
        """Queue a span (any thread; never blocks). Tokenizing happens here, off the loop.

        The backlog is bounded: with MAX_QUEUED_SPANS spans already waiting (between two
        frames, or for their frame) a new one is refused with SpanQueueFullError, whose
        message says so; nothing waits unboundedly to land minutes late."""
        if self.pending_count() >= self.MAX_QUEUED_SPANS:
            raise SpanQueueFullError(
                f"{self.MAX_QUEUED_SPANS} spans are already waiting to be injected: this one "
                f"({source}) was dropped")
        with self._id_lock:
            span_id = next(self._ids)
        content = tuple(self.span_tokenizer.content(text))
        span = _PreparedSpan(span_id, text, source, content, not_before_frame, origin_frame,
                             deadline_frame)
        try:
            self._incoming.put_nowait(span)
        except queue.Full as exc:
            raise SpanQueueFullError(
                f"{self.MAX_QUEUED_SPANS} spans are already waiting to be injected: this one "
                f"({source}) was dropped") from exc
        return span_id

    def has_pending(self) -> bool:
        return self._active is not None or bool(self._waiting) or not self._incoming.empty()

    def _next_span(self, frame_index: int) -> _PreparedSpan | None:
        while True:
            try:
                self._waiting.append(self._incoming.get_nowait())
            except queue.Empty:
                break
        for i, span in enumerate(self._waiting):
            if span.not_before_frame <= frame_index:
                return self._waiting.pop(i)
        return None

    def _late(self, span: _PreparedSpan, frame_index: int) -> SpanLate | None:
        if span.deadline_frame is None or frame_index <= span.deadline_frame:
            return None
        origin = span.origin_frame if span.origin_frame is not None else span.deadline_frame
        return SpanLate(span.span_id, span.source, span.text, origin, frame_index,
                        round((frame_index - origin) * FRAME_S, 3))

    def _accepted(self, span: _PreparedSpan, tokens: SpanTokens) -> SpanAccepted:
        kept = len(tokens.content_ids)
        cuts: tuple[Cut, ...] = ()
        if tokens.truncated:  # a block is never split: its limit is what fits in a frame
            limit = "block limit on this device" if self.blocks else "span limit"
            cuts = (Cut("the span's content", tokens.original_content_tokens, kept, "tokens",
                        f"the speech model's {limit}: {kept:,} tokens"),)
        return SpanAccepted(span.span_id, span.source, span.text, len(tokens.ids),
                            tokens.truncated, tokens.original_content_tokens, kept,
                            cuts=cuts, read_chars=tokens.read_chars)

    def before_frame(self, frame_index: int) -> list[EngineEvent]:
        """Inject at most one chunk (<= chunk_limit positions), or one block, before frame
        `frame_index`."""
        if self._blocks:
            return self._block_before_frame(frame_index)
        events: list[EngineEvent] = []
        if self._active is None:
            span = self._next_span(frame_index)
            while span is not None and (late := self._late(span, frame_index)) is not None:
                events.append(late)
                span = self._next_span(frame_index)
            if span is None:
                return events
            tokens = self.span_tokenizer.cut(span.text, span.content)
            events.append(self._accepted(span, tokens))
            if not tokens.content_ids:
                events.append(SpanRejected(span.span_id, span.source, "nothing left to inject"))
                return events
            self._active = _ActiveSpan(span, tokens)
        active = self._active
        ids = active.tokens.ids
        chunk = ids[active.cursor : active.cursor + self.chunk_limit]
        start = time.perf_counter()
        self._reader.read_positions(chunk)
        self._reader.sync()
        elapsed_ms = (time.perf_counter() - start) * 1000.0
        self._ledger.add_span_positions(len(chunk))
        if active.first_frame < 0:
            active.first_frame = frame_index
        events.append(
            SpanChunkInjected(
                active.span.span_id, active.span.source, frame_index, len(chunk),
                active.chunks, elapsed_ms,
            )
        )
        active.cursor += len(chunk)
        active.chunks += 1
        if active.cursor >= len(ids):
            events.append(
                SpanInjected(
                    active.span.span_id, active.span.source, active.first_frame, frame_index,
                    len(ids), active.chunks, origin_frame=active.span.origin_frame,
                )
            )
            self._active = None
        return events

    def _block_before_frame(self, frame_index: int) -> list[EngineEvent]:
        events: list[EngineEvent] = []
        self.last_block = None
        reader = self._reader
        if not reader.can_read_block():
            return events  # before the first frame out: spans wait
        while (span := self._next_span(frame_index)) is not None:
            late = self._late(span, frame_index)
            if late is not None:
                events.append(late)
                continue
            tokens = self.span_tokenizer.cut(span.text, span.content)
            events.append(self._accepted(span, tokens))
            if not tokens.content_ids:
                events.append(SpanRejected(span.span_id, span.source, "nothing left to inject"))
                continue
            start = time.perf_counter()
            n = reader.read_block(tokens.ids)
            reader.sync()
            elapsed_ms = (time.perf_counter() - start) * 1000.0
            self._ledger.add_span_positions(n)
            self.last_block = (span.span_id, n, elapsed_ms)
            events.append(SpanChunkInjected(span.span_id, span.source, frame_index, n, 0,
                                            elapsed_ms))
            events.append(SpanInjected(span.span_id, span.source, frame_index, frame_index, n,
                                       1, origin_frame=span.origin_frame))
            break  # one block between two frames
        return events
