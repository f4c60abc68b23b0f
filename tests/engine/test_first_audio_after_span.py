"""What the user hears first of a span: one event, right after the first frame made since
it landed, carrying that frame's time (a turn's latency ends there)."""

from __future__ import annotations

import numpy as np

from app.engine import events as ev
from app.engine.local_engine import open_conversation
from app.engine.speech_engine import EngineOptions
from app.frames import FRAME_SAMPLES
from tests.queues import drain


def test_each_landed_span_names_its_first_frame_of_audio_once(tiny_checkpoint):
    engine = open_conversation(tiny_checkpoint, EngineOptions(seed=1, chunk_limit=16))
    short = engine.inject("the capital of australia is canberra", "search", at_frame=5)
    long = engine.inject("word " * 100, "file", at_frame=10)  # several chunks
    engine.start()
    for _ in range(40):
        assert engine.push_frame(np.zeros(FRAME_SAMPLES, np.float32), 10)
    engine.finish_input()
    assert engine.join(60.0)
    events = drain(engine.events)
    heard = [e for e in events if isinstance(e, ev.FirstAudioAfterSpan)]
    assert [h.span_id for h in heard] == [short, long]
    for first in heard:
        landed = next(e for e in events
                      if isinstance(e, ev.SpanInjected) and e.span_id == first.span_id)
        assert first.frame_index == landed.last_frame  # it landed before this frame
        audio_at = events.index(next(e for e in events if isinstance(e, ev.AudioOut)
                                     and e.frame_index == first.frame_index))
        after = events[audio_at + 1: events.index(first)]
        assert all(isinstance(e, ev.FirstAudioAfterSpan) for e in after)  # right after it
        assert first.monotonic_s == events[audio_at].monotonic_s
