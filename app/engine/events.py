"""Typed events the engine thread emits. Everything crossing a thread is one of these.

They are frozen; `AudioOut.pcm` is a fresh array owned by the receiver.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from app.cuts import Cut


@dataclass(frozen=True)
class EngineReady:
    model_id: str
    device: str
    dtype: str
    chunk_limit: int  # most span positions prefilled between two frames
    step_ms: float | None  # median full-frame time measured at start-up (None: not measured)
    budget_ms: float
    context_window: int
    prompt_frames: int  # frames used by the checkpoint's own start of conversation
    # The most content tokens one span carries here (a block is never split: what fits in
    # the frame measured on this device); 0: not said. The LLM is told to answer within it.
    span_tokens: int = 0


@dataclass(frozen=True)
class AudioOut:
    frame_index: int
    pcm: npt.NDArray[np.float32]  # [1920] at 24 kHz
    monotonic_s: float = field(default_factory=time.monotonic)  # when the frame was ready


@dataclass(frozen=True)
class TextPiece:
    frame_index: int
    text: str
    token_id: int


@dataclass(frozen=True)
class SpanAccepted:
    span_id: int
    source: str
    text: str
    tokens: int  # positions it will occupy, wrapping included
    truncated: bool
    original_content_tokens: int
    kept_content_tokens: int
    # What the bounds took out on the way (app/cuts.py), the token limit's last; and, when
    # the model reads only the start of `text`, how many of its characters that is.
    cuts: tuple[Cut, ...] = ()
    read_chars: int | None = None


@dataclass(frozen=True)
class SpanChunkInjected:
    span_id: int
    source: str
    before_frame: int  # the chunk landed between frame before_frame - 1 and before_frame
    k: int
    chunk_index: int
    prefill_ms: float


@dataclass(frozen=True)
class SpanInjected:
    span_id: int
    source: str
    first_frame: int
    last_frame: int  # its last chunk landed before this frame
    positions: int
    chunks: int
    monotonic_s: float = field(default_factory=time.monotonic)  # when its last chunk landed
    origin_frame: int | None = None  # the frame of the <ret> it answers, if any


@dataclass(frozen=True)
class FirstAudioAfterSpan:
    """The first frame of the model's audio made after span `span_id` landed: emitted right
    after that frame's AudioOut, with the same time, once per landed span (what the user
    hears first of an answer; the orchestrator times a turn's latency by it)."""

    span_id: int
    frame_index: int
    monotonic_s: float  # the frame's AudioOut.monotonic_s


@dataclass(frozen=True)
class SpanLate:
    """A span that answers a <ret> but reached the frame loop after its deadline: dropped,
    as the checkpoint was trained (answers later than that never appeared in training)."""

    span_id: int
    source: str
    text: str
    origin_frame: int  # the <ret> frame
    frame_index: int  # the frame it would have landed before
    seconds: float  # from <ret> to then, in conversation time


@dataclass(frozen=True)
class RetToken:
    """The model emitted its retrieval token: it wants information now."""

    frame_index: int
    monotonic_s: float = field(default_factory=time.monotonic)


@dataclass(frozen=True)
class BlockSlot:
    """The frame a span block went in: its one forward plus that frame's step, against the
    80 ms frame (the block is never split, so a long one can overrun; it is said here)."""

    span_id: int
    frame_index: int
    positions: int
    prefill_ms: float
    step_ms: float
    total_ms: float
    over_budget: bool


@dataclass(frozen=True)
class SpanRejected:
    span_id: int
    source: str
    reason: str


@dataclass(frozen=True)
class ContextUsage:
    window: int
    used: int  # positions currently inside the attention window
    frame_positions: int  # total frames stepped
    span_positions: int  # total positions injected
    span_positions_in_window: int
    wrapped: bool  # the conversation is longer than the window


@dataclass(frozen=True)
class FrameStats:
    frame_index: int
    frame_ms: float  # engine time for this frame, injection included
    inject_ms: float
    context: ContextUsage


@dataclass(frozen=True)
class EngineError:
    message: str
    fatal: bool


@dataclass(frozen=True)
class EngineStopped:
    frames: int
    reason: str


EngineEvent = (
    EngineReady
    | AudioOut
    | TextPiece
    | SpanAccepted
    | SpanChunkInjected
    | SpanInjected
    | FirstAudioAfterSpan
    | SpanRejected
    | SpanLate
    | RetToken
    | BlockSlot
    | FrameStats
    | EngineError
    | EngineStopped
)
