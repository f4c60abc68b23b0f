"""A short conversation that reads one span, on whatever weights a checkpoint holds: what the
engine must get through at every precision (int8, fp8, int4), whatever the layers compute."""

from __future__ import annotations

import numpy as np

from app.checkpoints.loader import LoadedCheckpoint
from app.engine import events as ev
from app.engine.local_engine import open_conversation
from app.engine.row_conversation import RowConversation
from app.engine.speech_engine import EngineOptions
from app.frames import FRAME_SAMPLES
from tests.queues import drain


def converse_with_a_span(checkpoint: LoadedCheckpoint, frames: int
                         ) -> tuple[RowConversation, list]:
    """`frames` frames of quiet noise through a greedy engine that reads one span at frame 5,
    to the end of its input. Asserts it ran clean (no error, one frame of audio out for each
    frame in, the span injected); returns the ended conversation and all its events."""
    engine = open_conversation(checkpoint, EngineOptions(seed=1, greedy=True, chunk_limit=8))
    span = engine.inject("the capital of australia is canberra", "search", at_frame=5)
    engine.start()
    rng = np.random.default_rng(0)
    for _ in range(frames):
        frame = (0.05 * rng.standard_normal(FRAME_SAMPLES)).astype(np.float32)
        assert engine.push_frame(frame, 10)
    engine.finish_input()
    assert engine.join(120), "the engine thread did not end"
    events = drain(engine.events)
    assert not [e for e in events if isinstance(e, ev.EngineError)], events
    assert len([e for e in events if isinstance(e, ev.AudioOut)]) == frames
    assert any(isinstance(e, ev.SpanInjected) and e.span_id == span for e in events)
    return engine, events
