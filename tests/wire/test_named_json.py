"""The one serialiser of named types (app/wire/named_json.py) writes the wire's messages as
the protocol says: `type` first, then every field in its declared order, None as null (a
client of an older version reads the same bytes); and it reads them back as their types."""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from typing import ClassVar

import pytest

from app.wire import events as wire
from app.wire.named_json import omitted_when_none, registry, to_json_object

SERVER_EVENTS = [
    wire.Ready(persona="a tutor", model="tiny", device="cpu", conversation=2,
               frames_received=7, chunk_limit=128, context_window=375, span_tokens=300),
    wire.Busy(retry_after_s=2.5), wire.Text(" hello"), wire.UserText(3, True, 1.25, "hi"),
    wire.Ret(52), wire.Question("capital of peru", 12.5), wire.SpanQueued(4, "client", "a1"),
    wire.SpanAccepted(4, "client", 9, True, 12, 9, "the span limit", 40),
    wire.Span("Lima.", "capital of peru", "llm", 9, 0.72, 12.2, 4, 1, 66, None),
    wire.SpanRejected(None, "client", "empty", "a2"), wire.NoSpan("q", "nothing found"),
    wire.Late("q", 3.1, "llm", None, "orchestrator"), wire.Slot(12.2, 93.0, 105.2, True, 4),
    wire.Voice("NATF0"), wire.AudioCodec("opus"), wire.Error("frame", "too short", 3),
    wire.Text(" there", 12), wire.Words([[" hi", 3], [3, 0, "hi", 1.25, 1]]),
]


def test_every_server_event_is_written_type_first_with_all_its_fields():
    for event in SERVER_EVENTS:
        text = wire.encode_event(event)
        obj = json.loads(text)
        written = [f.name for f in fields(event)  # but ours left out while None
                   if not (getattr(event, f.name) is None and f.metadata)]
        assert list(obj) == ["type"] + written
        assert obj["type"] == event.TYPE
        assert wire.decode_event(text) == event
    # The reference's `text`, as its page has always read it: our `audio` is not there.
    assert wire.encode_event(wire.Text(" hello")) == '{"type": "text", "delta": " hello"}'


def test_a_message_of_an_unknown_type_or_shape_is_kept_not_raised():
    assert wire.decode_event('{"type": "hologram", "x": 1}') == wire.UnknownEvent(
        "hologram", {"type": "hologram", "x": 1})
    assert wire.decode_event('{"type": "ret", "frame": 5, "newer": true}') == wire.Ret(5)


@dataclass(frozen=True)
class _Sometimes:
    TYPE: ClassVar[str] = "sometimes"
    always: int | None = None
    sometimes: int | None = omitted_when_none()


def test_only_a_field_declared_so_is_left_out_while_none():
    assert to_json_object(_Sometimes()) == {"type": "sometimes", "always": None}
    assert to_json_object(_Sometimes(1, 2)) == {"type": "sometimes", "always": 1, "sometimes": 2}


def test_two_types_of_one_name_are_refused():
    with pytest.raises(ValueError, match="two types are named 'ret'"):
        registry((wire.Ret, wire.Ret))
