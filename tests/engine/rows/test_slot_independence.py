"""One slot's error, silence or leaving never stalls or changes another.

tiny-cs, four slots at once. W converses normally. X asks for a voice that does not exist:
its start fails at the boundary it joins, it alone gets the error, its row is free again.
Y joins and stays silent (a slow client) while W talks, then sends a few frames and is
stopped. Z's span fails on the engine thread (its block cannot be built): Z alone ends with
the error. W's conversation, and Y's once it talks, equal each run alone on a one-row
engine of its own: every column fed to the transformer, every frame out, every event.
"""

from __future__ import annotations

import time

from app.engine import events as ev
from app.engine.local_engine import LocalEngine
from app.engine.speech_engine import EngineOptions
from tests.engine.rows.recording import (
    assert_same_audio,
    comparable,
    conversation_of,
    drain,
    frames_of,
    load,
    record_batched,
    run_alone,
    speech,
)

FRAMES = 12
Z_SPAN_FRAME = 4
W_SPANS = {5: "the capital of australia is canberra"}


def _wait_for(predicate, timeout: float = 120.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def test_an_error_or_a_silent_slot_leaves_the_others_alone(tiny_cs_folder):
    ck = load(tiny_cs_folder, "tiny-cs")
    engine = LocalEngine(ck, 4, EngineOptions(greedy=True))
    rec = record_batched(engine)
    options = EngineOptions(greedy=True, input_queue_frames=32)
    w, x, y, z = (engine.open(o) for o in (
        options, EngineOptions(greedy=True, voice="no-such-voice"), options, options))
    assert w is not None and x is not None and y is not None and z is not None
    assert engine.free_rows == 0 and engine.open(options) is None

    def broken_block(ids):
        raise RuntimeError("this span cannot be read")

    z.injector._reader.read_block = broken_block  # Z's span fails on the engine thread
    z.inject("a span that fails", "test", at_frame=Z_SPAN_FRAME)
    for frame, text in W_SPANS.items():
        w.inject(text, "test", at_frame=frame)
    for slot, seed in ((w, 1), (z, 2)):
        for chunk in frames_of(speech(seed, FRAMES)):
            assert slot.push_frame(chunk, timeout=10)
    w.finish_input()
    for slot in (w, x, y, z):
        slot.start()
    engine.start()

    assert w.join(300)  # W ran to its end while Y sent nothing and X and Z failed
    assert x.join(60) and z.join(60)
    assert y.running and y.frame_index == 0  # the silent slot did not advance
    w_events, x_events, z_events = drain(w.events), drain(x.events), drain(z.events)

    x_errors = [e for e in x_events if isinstance(e, ev.EngineError)]
    assert len(x_errors) == 1 and "no-such-voice" in x_errors[0].message
    assert [e for e in x_events if isinstance(e, ev.EngineStopped)] == [
        ev.EngineStopped(0, "error")]
    z_errors = [e for e in z_events if isinstance(e, ev.EngineError)]
    assert len(z_errors) == 1 and "this span cannot be read" in z_errors[0].message
    assert [e for e in z_events if isinstance(e, ev.EngineStopped)] == [
        ev.EngineStopped(Z_SPAN_FRAME, "error")]
    assert [e.frame_index for e in z_events if isinstance(e, ev.AudioOut)] == list(
        range(Z_SPAN_FRAME))
    assert engine.free_rows == 3  # W's (it ended), X's and Z's rows are free again
    assert not w.running and not x.running and not z.running

    alone = run_alone(tiny_cs_folder, "tiny-cs", options, speech(1, FRAMES), W_SPANS)
    w_record = conversation_of(rec, w.row, 0)
    assert w_record.fed == alone.fed and w_record.frames == alone.frames
    assert comparable(w_events) == comparable(alone.events)
    assert_same_audio(w_events, alone.events, exact=False)

    # The silent slot talks at last, from its own frame 0, and is stopped: it leaves.
    for chunk in frames_of(speech(3, 3)):
        assert y.push_frame(chunk, timeout=10)
    assert _wait_for(lambda: y.frame_index == 3)
    assert y.stop(30)
    y_events = drain(y.events)
    assert [e.frame_index for e in y_events if isinstance(e, ev.AudioOut)] == [0, 1, 2]
    assert isinstance(y_events[-1], ev.EngineStopped) and y_events[-1].reason == "stopped"
    assert y.stats().frames == 3
    # Its row did not move while it was silent: its three frames are its conversation alone.
    y_alone = run_alone(tiny_cs_folder, "tiny-cs", options, speech(3, 3), {})
    y_record = conversation_of(rec, y.row, 0)
    assert y_record.fed == y_alone.fed and y_record.frames == y_alone.frames
    assert_same_audio(y_events, y_alone.events, exact=False)
    assert engine.free_rows == 4
    late = engine.open(options)
    assert late is not None
    assert engine.stop()
