"""A span for one slot costs the others nothing but its own forward, and changes nothing.

Three slots talk; the first gets a span at frame 6 (tiny-cs: one block; tiny: positions in
chunks). The same three conversations run again without it. Every forward of the
transformer is recorded with its input's shape: the span's forward has batch 1 and only
the span's positions (never 3 rows of them); each frame is ONE batched step of one
position, as many as without the span (the step is not repeated); and the other two slots'
events, audio bit for bit, are those of the run without the span, the span's frame
included.
"""

from __future__ import annotations

import pytest

from app.engine import events as ev
from app.engine.local_engine import LocalEngine
from app.engine.speech_engine import EngineOptions
from tests.engine.rows.recording import (
    assert_same_audio,
    audio,
    comparable,
    drain,
    frames_of,
    load,
    record_batched,
    speech,
)

FRAMES = 10
SPAN_FRAME = 6
SPAN = "the capital of australia is canberra and its lake is called burley griffin"


def _run(folder, model: str, with_span: bool):
    engine = LocalEngine(load(folder, model), 3, EngineOptions(greedy=True, chunk_limit=64))
    rec = record_batched(engine)
    slots = []
    for seed in range(3):
        slot = engine.open(EngineOptions(greedy=True, input_queue_frames=32))
        assert slot is not None
        if seed == 0 and with_span:
            slot.inject(SPAN, "test", at_frame=SPAN_FRAME)
        for chunk in frames_of(speech(10 + seed, FRAMES)):
            assert slot.push_frame(chunk, timeout=10)
        slot.finish_input()
        slot.start()
        slots.append(slot)
    engine.start()
    for slot in slots:
        assert slot.join(300)
    assert engine.stop()
    return engine, rec, slots, [drain(slot.events) for slot in slots]


@pytest.mark.parametrize("model", ["tiny", "tiny-cs"])
def test_a_span_for_one_slot_runs_on_its_row_alone(model, tiny_folder, tiny_cs_folder):
    folder = tiny_folder if model == "tiny" else tiny_cs_folder
    engine, rec, slots, events = _run(folder, model, with_span=True)
    _plain_engine, plain_rec, _plain_slots, plain_events = _run(folder, model, with_span=False)

    injected = [e for e in events[0] if isinstance(e, ev.SpanInjected)]
    assert [e.first_frame for e in injected] == [SPAN_FRAME]
    span_positions = injected[0].positions
    chunks = [e for e in events[0] if isinstance(e, ev.SpanChunkInjected)]
    row = slots[0].row
    # The span's forwards: its row's, batch 1, only its positions; as many as its chunks.
    span_forwards = [f for f in rec.forwards if f[0] == "row" and f not in plain_rec.forwards]
    assert [f[1] for f in span_forwards] == [row] * len(chunks)
    assert all(shape[0] == 1 for _kind, _row, shape in span_forwards)
    assert sum(shape[-1] for _kind, _row, shape in span_forwards) == span_positions
    assert [shape[-1] for *_rest, shape in span_forwards] == [c.k for c in chunks]
    # Every row forward is one row's, at batch 1.
    assert all(shape[0] == 1 for kind, _row, shape in rec.forwards if kind == "row")
    # One batched step per tick, of one position for the three rows, as without the span.
    steps = [f for f in rec.forwards if f[0] == "step"]
    assert len(steps) == engine.ticks == FRAMES
    assert steps == [f for f in plain_rec.forwards if f[0] == "step"]
    assert all(shape == (3, 17, 1) and rows == (0, 1, 2) for _k, rows, shape in steps)
    # The others' frames are those of the run without the span, its frame included.
    for other in (1, 2):
        assert comparable(events[other]) == comparable(plain_events[other])
        assert_same_audio(events[other], plain_events[other], exact=True)
        assert len([e for e in events[other] if isinstance(e, ev.AudioOut)]) == FRAMES
    # The per-slot figures the server publishes.
    figures = [slot.stats() for slot in slots]
    assert [(f.frames, f.spans_landed, f.dropped_frames) for f in figures] == [
        (FRAMES, 1, 0), (FRAMES, 0, 0), (FRAMES, 0, 0)]
    assert all(f.frame_ms_p50 is not None and f.frame_ms_p99 is not None
               and f.frame_ms_p99 >= f.frame_ms_p50 for f in figures)
    # ... while the slot that read the span went on differently from there.
    assert audio(events[0])[SPAN_FRAME + 1:].tobytes() != audio(plain_events[0])[
        SPAN_FRAME + 1:].tobytes()
