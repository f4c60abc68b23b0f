"""The server's wire events read back as the engine's own: the app's span ids, frames on the
app's own count across a reconnect, and a lost conversation's spans out of the context."""

from __future__ import annotations

import numpy as np

from app.engine import events as ev
from app.remote.engine_events import EngineEventMapper, SentSpan
from app.wire import events as wire

SILENCE = np.zeros(1920, dtype=np.float32)


def conversation(mapper: EngineEventMapper, frames: int, window: int = 100) -> None:
    mapper.new_conversation(wire.Ready(context_window=window))
    for _ in range(frames):
        mapper.audio(SILENCE)


def test_a_span_keeps_the_apps_id_from_queued_to_landed() -> None:
    mapper = EngineEventMapper()
    conversation(mapper, 3)
    mapper.sent(7, SentSpan("Canberra.", "llm", origin_frame=1))
    assert mapper.map(wire.SpanQueued(span_id=40, source="llm", id="7")) == []
    accepted, = mapper.map(wire.SpanAccepted(span_id=40, source="llm", tokens=12))
    assert accepted == ev.SpanAccepted(7, "llm", "Canberra.", 12, False, 12, 12)
    chunk, landed = mapper.map(wire.Span(text="Canberra.", source="llm", frames=12,
                                         span_id=40, landed_frame=2))
    # Where its positions went, as a local engine says it (the context panel places it).
    assert isinstance(chunk, ev.SpanChunkInjected) and (chunk.span_id, chunk.k) == (7, 12)
    assert isinstance(landed, ev.SpanInjected)
    assert (landed.span_id, landed.last_frame, landed.positions, landed.origin_frame) == (
        7, 2, 12, 1)
    assert mapper.unlanded() == []  # landed: nothing left to lose


def test_after_a_reconnect_frames_go_on_and_the_old_spans_are_out_of_context() -> None:
    mapper = EngineEventMapper()
    conversation(mapper, 10)
    mapper.sent(1, SentSpan("old", "notes", None))
    mapper.map(wire.SpanQueued(span_id=1, source="notes", id="1"))
    mapper.map(wire.Span(frames=5, span_id=1, landed_frame=4))
    mapper.sent(2, SentSpan("in flight", "notes", None))
    lost = mapper.unlanded()  # the connection dropped
    assert [span_id for span_id, _ in lost] == [2]

    conversation(mapper, 0)  # the new conversation's `ready`
    ret, = mapper.map(wire.Ret(frame=2))
    assert ret.frame_index == 12  # the server's frame 2 is the app's 12th: never back
    audio, stats = mapper.audio(SILENCE)
    assert audio.frame_index == 10
    assert stats.context.used == 1 and stats.context.span_positions == 0
    # 10 frames and 5 span positions before, and a whole window: the old span slid out.
    assert stats.context.frame_positions == 10 + 5 + 100 + 1
    # A span id of the lost conversation means nothing on the new one.
    assert mapper.map(wire.SpanAccepted(span_id=1, source="notes", tokens=3)) == []


def test_a_refused_span_is_said_under_the_apps_id() -> None:
    mapper = EngineEventMapper()
    conversation(mapper, 1)
    mapper.sent(3, SentSpan("too much", "paste", None))
    rejected, = mapper.map(wire.SpanRejected(span_id=None, source="paste",
                                             reason="backlog full", id="3"))
    assert rejected == ev.SpanRejected(3, "paste", "backlog full")


def test_the_first_frame_after_a_landed_span_is_said_once_as_a_local_engine_says_it() -> None:
    mapper = EngineEventMapper()
    conversation(mapper, 3)
    mapper.sent(7, SentSpan("Canberra.", "llm", origin_frame=None))
    mapper.map(wire.SpanQueued(span_id=40, source="llm", id="7"))
    mapper.map(wire.Span(text="Canberra.", source="llm", frames=12, span_id=40,
                         landed_frame=3))
    audio, _ = mapper.audio(SILENCE)  # frame 3: the first one after the span
    heard, = mapper.first_audio(audio)
    assert heard == ev.FirstAudioAfterSpan(7, 3, audio.monotonic_s)
    later, _ = mapper.audio(SILENCE)
    assert mapper.first_audio(later) == []
