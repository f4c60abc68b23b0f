"""The span injector: Context Spanning's real-time chunked prefill.

Between two frames, on the engine thread, a span's tokens go into the temporal
transformer as ONE forward pass over K positions: text ids in stream 0 and the zero token
(-1, which embeds to an exact zero vector) in the 16 audio streams. Only the transformer's
streaming state advances (RoPE offsets, KV rings); LMGen's own frame bookkeeping (its
offsets, token ring and acoustic delays) is left alone, so audio carries on as if nothing
happened. A span longer than what fits in the frame budget is split across frames.
"""

from __future__ import annotations

import itertools
import queue
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from moshi.models import LMGen

from app.engine.context_ledger import ContextLedger
from app.engine.device import synchronize
from app.engine.events import (
    EngineEvent,
    SpanAccepted,
    SpanChunkInjected,
    SpanInjected,
    SpanRejected,
)
from app.engine.span_text import SpanTokenizer, SpanTokens


def span_positions(lm_gen: LMGen, token_ids: Sequence[int]) -> torch.Tensor:
    """The K injected positions as codes [B', 17, K]: text in stream 0, -1 elsewhere.

    B' is the LM's streaming batch: doubled under classifier-free guidance, where the
    null branch sees no text when the checkpoint's CFG drops text.
    """
    lm = lm_gen.lm_model
    state = lm_gen._streaming_state  # moshi keeps no public accessor for it
    if state is None:
        raise RuntimeError("the LMGen is not streaming")
    batch = state.batch_size
    ids = torch.tensor(list(token_ids), dtype=torch.long, device=lm.device)
    codes = torch.full(
        (batch, lm.num_codebooks, ids.numel()), lm.zero_token_id, dtype=torch.long, device=lm.device
    )  # [B, 17, K]
    codes[:, 0, :] = ids
    if lm_gen.cfg_coef != 1.0:
        codes = codes.repeat(2, 1, 1)  # [2B, 17, K]
        if lm_gen.cfg_is_no_text:
            codes[batch:, 0, :] = lm.zero_token_id
    return codes


@torch.no_grad()
def prefill(lm_gen: LMGen, token_ids: Sequence[int]) -> torch.Tensor:
    """Run one forward pass of the temporal transformer over the positions of `token_ids`.

    Returns the transformer output [B', K, dim]. Runs eagerly (never through the step's
    CUDA graph), updating the same state tensors in place, so the graph's replay is intact.
    """
    state = lm_gen._streaming_state
    codes = span_positions(lm_gen, token_ids)
    transformer_out, _text_logits = lm_gen.lm_model.forward_text(
        codes, state.condition_sum, state.condition_cross
    )
    return transformer_out


@dataclass(frozen=True)
class _PreparedSpan:
    span_id: int
    text: str
    source: str
    tokens: SpanTokens
    not_before_frame: int


class _ActiveSpan:
    def __init__(self, span: _PreparedSpan) -> None:
        self.span = span
        self.cursor = 0
        self.chunks = 0
        self.first_frame = -1


class SpanQueueFullError(RuntimeError):
    pass


class SpanInjector:
    """Accepts spans from any thread; injects them, chunk by chunk, on the engine thread."""

    MAX_QUEUED_SPANS = 64

    def __init__(
        self,
        lm_gen: LMGen,
        span_tokenizer: SpanTokenizer,
        ledger: ContextLedger,
        chunk_limit: int,
    ) -> None:
        self._lm_gen = lm_gen
        self.span_tokenizer = span_tokenizer
        self._ledger = ledger
        self.chunk_limit = max(1, chunk_limit)
        self._incoming: queue.Queue[_PreparedSpan] = queue.Queue(self.MAX_QUEUED_SPANS)
        self._waiting: list[_PreparedSpan] = []
        self._active: _ActiveSpan | None = None
        self._ids = itertools.count(1)
        self._id_lock = threading.Lock()

    def submit(self, text: str, source: str, not_before_frame: int = 0) -> int:
        """Queue a span (any thread; never blocks). Tokenizing happens here, off the loop."""
        with self._id_lock:
            span_id = next(self._ids)
        tokens = self.span_tokenizer.encode(text)
        span = _PreparedSpan(span_id, text, source, tokens, not_before_frame)
        try:
            self._incoming.put_nowait(span)
        except queue.Full as exc:
            raise SpanQueueFullError(
                f"{self.MAX_QUEUED_SPANS} spans are already waiting to be injected"
            ) from exc
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

    def before_frame(self, frame_index: int) -> list[EngineEvent]:
        """Inject at most one chunk (<= chunk_limit positions) before frame `frame_index`."""
        events: list[EngineEvent] = []
        if self._active is None:
            span = self._next_span(frame_index)
            if span is None:
                return events
            tokens = span.tokens
            events.append(
                SpanAccepted(
                    span.span_id,
                    span.source,
                    span.text,
                    len(tokens.ids),
                    tokens.truncated,
                    tokens.original_content_tokens,
                    len(tokens.content_ids),
                )
            )
            if not tokens.content_ids:
                events.append(SpanRejected(span.span_id, span.source, "nothing left to inject"))
                return events
            self._active = _ActiveSpan(span)
        active = self._active
        ids = active.span.tokens.ids
        chunk = ids[active.cursor : active.cursor + self.chunk_limit]
        device = self._lm_gen.lm_model.device
        start = time.perf_counter()
        prefill(self._lm_gen, chunk)
        synchronize(device)
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
                    len(ids), active.chunks,
                )
            )
            self._active = None
        return events
