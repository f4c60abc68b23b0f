"""The batched engine measures its frame budget at warm-up with every slot talking, and each
slot's span limit comes from it, as the single engine's does (tests/engine/test_span_budget.py):
a slow forward lowers it, a fast one raises it to the manifest's maximum. The timings come
through the engine's test hook (the forwards still run); nothing here is timed."""

from __future__ import annotations

import numpy as np

from app.engine import events as ev
from app.engine.local_engine import LocalEngine
from app.engine.speech_engine import EngineOptions
from app.frames import FRAME_SAMPLES
from tests.engine.test_span_budget import LONG, MARGIN, fast, slow
from tests.queues import drain


def _converse(checkpoint, timing) -> tuple[LocalEngine, list]:
    """Two slots warm up under `timing`; one hears a long span, both hear silence."""
    engine = LocalEngine(checkpoint, 2, EngineOptions(greedy=True, budget_margin=MARGIN,
                                                        budget_timing=timing))
    engine.start()
    try:
        assert engine.ready.wait(120.0)
        slots = [engine.open(EngineOptions(greedy=True, input_queue_frames=32))
                 for _ in range(2)]
        for slot in slots:
            assert slot is not None
            slot.start()
        first = slots[0]
        assert first is not None and first.ready.wait(60.0)
        first.inject(LONG, "test", at_frame=4)
        for _ in range(12):
            for slot in slots:
                assert slot is not None and slot.push_frame(
                    np.zeros(FRAME_SAMPLES, np.float32), 10)
        for slot in slots:
            assert slot is not None
            slot.finish_input()
            assert slot.join(120.0)
        return engine, drain(first.events)
    finally:
        engine.stop()


def test_a_slot_s_span_limit_follows_the_budget_measured_with_every_slot_talking(
        tiny_cs_checkpoint):
    manifest_max = tiny_cs_checkpoint.manifest.max_span_tokens
    wrapping = 2  # tiny-cs: [open] content [close]

    engine, events = _converse(tiny_cs_checkpoint, slow)
    assert engine.budget is not None and engine.budget.chunk_limit == 100
    ready = next(e for e in events if isinstance(e, ev.EngineReady))
    assert ready.span_tokens == 100 - wrapping and ready.step_ms == 30.0
    landed = next(e for e in events if isinstance(e, ev.SpanInjected))
    assert landed.positions == 100 and landed.chunks == 1  # one block, cut to the budget

    engine, events = _converse(tiny_cs_checkpoint, fast)
    ready = next(e for e in events if isinstance(e, ev.EngineReady))
    assert ready.span_tokens == manifest_max - wrapping
    landed = next(e for e in events if isinstance(e, ev.SpanInjected))
    assert landed.positions == manifest_max
