"""The span limit comes from the frame budget measured at warm-up on this device: a block
is never split, so the longest span is the longest block whose forward plus one frame fit
the 80 ms frame with the margin, within the manifest's maximum. The timings are injected
through the engine's test hook (the forwards still run); nothing here is timed."""

from __future__ import annotations

import numpy as np

from app.engine import events as ev
from app.engine.local_engine import open_conversation
from app.engine.row_conversation import RowConversation
from app.engine.span_text import MIN_SPAN_POSITIONS
from app.engine.speech_engine import EngineOptions
from app.frames import FRAME_MS, FRAME_SAMPLES
from tests.queues import drain

LONG = "the quick brown fox jumps over the lazy dog " * 30  # far past any limit here
MARGIN = 0.25
BUDGET_MS = FRAME_MS * (1.0 - MARGIN)  # 60 ms


def fast(what: str, positions: int, _measured_ms: float) -> float:
    return 10.0 if what == "frame" else 1.0 + 0.001 * positions


def slow(what: str, positions: int, _measured_ms: float) -> float:
    # 30 ms a frame, 5 ms + 0.25 ms a position: 30 + 5 + 0.25 k <= 60  ->  k <= 100
    return 30.0 if what == "frame" else 5.0 + 0.25 * positions


def converse(checkpoint, timing, offered_before_start: bool = False
             ) -> tuple[RowConversation, list]:
    """Warm up under `timing`, then one long span and 12 frames of silence. The span is
    offered once the conversation is ready, or (`offered_before_start`) before it started,
    when nothing was measured yet."""
    engine = open_conversation(checkpoint, EngineOptions(
        seed=1, greedy=True, budget_margin=MARGIN, budget_timing=timing))
    if offered_before_start:
        engine.inject(LONG, "test", at_frame=4)
    engine.start()
    assert engine.ready.wait(120.0)
    if not offered_before_start:
        engine.inject(LONG, "test", at_frame=4)
    for _ in range(12):
        assert engine.push_frame(np.zeros(FRAME_SAMPLES, np.float32), 10)
    engine.finish_input()
    assert engine.join(120.0)
    return engine, drain(engine.events)


def test_a_slow_forward_lowers_the_span_limit_and_a_fast_one_raises_it_to_the_manifest(
        tiny_cs_checkpoint):
    manifest_max = tiny_cs_checkpoint.manifest.max_span_tokens  # 128 for tiny-cs
    wrapping = 2  # tiny-cs: [open] content [close]

    engine, events = converse(tiny_cs_checkpoint, slow)
    ready = next(e for e in events if isinstance(e, ev.EngineReady))
    assert engine.engine.budget is not None and engine.engine.budget.chunk_limit == 100
    assert ready.chunk_limit == 100 and ready.span_tokens == 100 - wrapping
    accepted = next(e for e in events if isinstance(e, ev.SpanAccepted))
    assert accepted.truncated and accepted.tokens == 100
    landed = next(e for e in events if isinstance(e, ev.SpanInjected))
    assert landed.positions == 100 and landed.chunks == 1  # one block, never split
    slot = next(e for e in events if isinstance(e, ev.BlockSlot))
    assert slot.positions == 100  # the block's own forward and its frame, in ms, as measured

    engine, events = converse(tiny_cs_checkpoint, fast)
    ready = next(e for e in events if isinstance(e, ev.EngineReady))
    assert ready.span_tokens == manifest_max - wrapping  # everything fits: the manifest's max
    landed = next(e for e in events if isinstance(e, ev.SpanInjected))
    assert landed.positions == manifest_max


def test_when_not_even_a_short_block_fits_the_limit_keeps_one_sentence(
        tiny_cs_checkpoint):
    def hopeless(what: str, positions: int, _measured_ms: float) -> float:
        return 90.0  # the frame alone is over the budget

    engine, events = converse(tiny_cs_checkpoint, hopeless)
    ready = next(e for e in events if isinstance(e, ev.EngineReady))
    assert ready.span_tokens == MIN_SPAN_POSITIONS - 2  # not cut to nothing
    slot = next(e for e in events if isinstance(e, ev.BlockSlot))
    assert slot.positions == MIN_SPAN_POSITIONS


def test_a_span_offered_before_the_start_is_cut_to_the_budget_measured_at_warm_up(
        tiny_cs_checkpoint):
    """Offered before anything was measured (an LLM answer queued while the model warms
    up), a span is still cut where the measured budget says, not at the manifest's cap."""
    _engine, events = converse(tiny_cs_checkpoint, slow, offered_before_start=True)
    accepted = next(e for e in events if isinstance(e, ev.SpanAccepted))
    assert accepted.truncated and accepted.tokens == 100
    landed = next(e for e in events if isinstance(e, ev.SpanInjected))
    assert landed.positions == 100

