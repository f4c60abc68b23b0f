"""The wire's messages: a client's are checked, the engine's and the LLM side's events read
as the reference names them (ret, question, span, no_span, late, slot)."""

from __future__ import annotations

import json

import pytest

from app.asr.events import AsrFinal
from app.engine import events as ev
from app.orchestrator import events as oe
from app.server.auth import presented_token, token_matches
from app.server.event_mapping import WireMapper
from app.wire import events as wire


def test_client_messages_are_checked():
    span = wire.decode_request(json.dumps({"type": "span", "text": "Paris", "id": 3}))
    assert span == wire.SpanRequest("Paris", "client", "3")
    context = wire.decode_request('{"type": "context", "name": "Ada", "location": "Lyon"}')
    assert context == wire.ContextRequest(None, "Ada", "Lyon")
    assert wire.decode_request('{"type": "reset"}') == wire.ResetRequest()
    refused = {
        "not json": "message", "[1]": "message", '{"type": "fly"}': "message",
        '{"type": "span", "text": "  "}': "span",
        '{"type": "span", "text": "x", "source": "a\\u0000b"}': "span",
        json.dumps({"type": "span", "text": "x" * 20_000}): "span",
        '{"type": "voice", "name": "../../etc/passwd"}': "voice",
        '{"type": "context", "persona": 5}': "persona",
    }
    for text, stage in refused.items():
        with pytest.raises(wire.WireError) as error:
            wire.decode_request(text)
        assert error.value.stage == stage, text


def test_server_events_round_trip_and_unknown_ones_are_kept():
    event = wire.Span("Paris", "capital?", "llm", 5, 0.4, 12.5, 3, 1, 40, 38)
    assert wire.decode_event(wire.encode_event(event)) == event
    newer = wire.decode_event('{"type": "text", "delta": "hi", "lang": "en"}')
    assert newer == wire.Text("hi")
    assert wire.decode_event('{"type": "hologram"}') == wire.UnknownEvent(
        "hologram", {"type": "hologram"})


def test_the_retrieval_flow_maps_to_the_references_events():
    mapper = WireMapper()
    out = []
    for event in [
        ev.RetToken(40),
        oe.TurnStarted(1, "capital of france", "ret"),
        oe.RetrievalQuestion(1, 40, "capital of france", "cache", 12.0),
        ev.SpanAccepted(7, "llm", "Paris is the capital.", 6, False, 4, 4),  # engine first
        oe.SpanQueued(1, 7, "Paris is the capital.", "llm"),
        ev.SpanChunkInjected(7, "llm", 44, 6, 0, 20.0),
        ev.SpanInjected(7, "llm", 44, 44, 6, 1, origin_frame=40),
        ev.BlockSlot(7, 44, 6, 20.0, 30.0, 50.0, False),
        oe.NoSpan(2, 80, "weather?", "no information found"),
        oe.RetrievalLate(3, 90, "time?", 3.1, "llm+clock"),
        ev.SpanLate(9, "llm", "late text", 100, 133, 2.64),
        ev.TextPiece(45, " Paris", 17),
        AsrFinal("what is the capital of france", 1.2, 2.4, "vad", 2.9),
        oe.TurnFailed(4, "timeout", "no answer in 30 s"),
        ev.FrameStats(1, 10.0, 0.0, ev.ContextUsage(375, 1, 1, 0, 0, False)),
    ]:
        out += mapper.map(event)
    assert out == [
        wire.Ret(40),
        wire.Question("capital of france", 12.0),
        wire.SpanAccepted(7, "llm", 6, False, 4, 4),  # its content's tokens: none cut
        wire.Span("Paris is the capital.", "capital of france", "llm", 6, 0.48, 20.0, 7, 1,
                  44, 40),
        wire.Slot(20.0, 30.0, 50.0, False, 7),
        wire.NoSpan("weather?", "no information found"),
        wire.Late("time?", 3.1, "llm+clock", None, "orchestrator"),
        wire.Late("", 2.64, "llm", 9, "engine"),
        wire.Text(" Paris"),
        wire.UserText(15, True, 2.4, "what is the capital of france"),
        wire.Error("retrieval", "LLM timeout: no answer in 30 s"),
    ]


def test_a_span_carries_its_question_whichever_of_the_engine_and_the_llm_side_spoke_first():
    for engine_first in (True, False):
        mapper = WireMapper()
        mapper.map(oe.RetrievalQuestion(1, 40, "capital of peru", "cache", 3.0))
        accepted = ev.SpanAccepted(7, "llm", "Lima.", 3, False, 2, 2)
        queued = oe.SpanQueued(1, 7, "Lima.", "llm")
        for event in ((accepted, queued) if engine_first else (queued, accepted)):
            mapper.map(event)
        mapper.map(ev.SpanChunkInjected(7, "llm", 44, 3, 0, 4.25))
        mapper.map(ev.SpanChunkInjected(7, "llm", 45, 3, 1, 5.5))
        (span,) = mapper.map(ev.SpanInjected(7, "llm", 44, 45, 3, 2, origin_frame=40))
        assert span == wire.Span("Lima.", "capital of peru", "llm", 3, 0.24, 9.8, 7, 2, 45,
                                 40), engine_first


def test_a_typed_turn_says_its_question_once():
    mapper = WireMapper()
    assert mapper.map(oe.TurnStarted(1, "hello?", "typed")) == [wire.Question("hello?", 0.0)]
    assert mapper.map(oe.TurnStarted(2, "ret question", "ret")) == []


def test_the_token_is_read_from_the_header_or_the_query():
    assert presented_token({"Authorization": "Bearer abc"}, {"token": "q"}) == "abc"
    assert presented_token({"Authorization": "Basic abc"}, {"token": "q"}) == "q"
    assert presented_token({}, {}) is None
    assert token_matches("abc", "abc") and token_matches(None, None)
    assert not token_matches(None, "abc") and not token_matches("abd", "abc")
    assert not token_matches("ab", "abc") and not token_matches("é", "abc")
