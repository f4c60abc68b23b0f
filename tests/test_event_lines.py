"""Every event of a conversation has its line in both formats, or a stated reason not to.

The engine's, the LLM side's and the recogniser's events (their unions, app/engine/events.py,
app/orchestrator/events.py, app/asr/events.py) are written out twice: as a run's JSONL
records (app/conversation/run_records.py) and as the server's wire events
(app/server/event_mapping.py), and the thin client reads the wire back into them
(app/remote/engine_events.py). Each of these is one table; an event one table forgot
would silently be no line there. Here each event type must be in its format's table or in
that format's list of what it does not write, not both; and an event of each type, built
from its fields, goes through both: a table's entry gives lines of that format that the
serialiser writes, a "not written" one gives none.
"""

from __future__ import annotations

import json
import types
import typing
from dataclasses import MISSING, fields, is_dataclass
from typing import Any

import pytest

from app.asr.events import AsrEvent
from app.conversation.run_records import (
    GATHERED,
    NOT_RECORDED,
    ONE_LINE,
    RECORD_TYPES,
    RunRecorder,
)
from app.engine.events import EngineEvent
from app.orchestrator.events import OrchestratorEvent
from app.remote.engine_events import ENGINE_EVENTS_OF, NOT_ENGINE_EVENTS, EngineEventMapper
from app.server.event_mapping import NOT_ON_THE_WIRE, WIRE_LINES, WireMapper
from app.wire import events as wire
from app.wire.named_json import to_json_object

EVENT_TYPES: tuple[type, ...] = (typing.get_args(EngineEvent) + typing.get_args(OrchestratorEvent)
                                 + typing.get_args(AsrEvent))
WIRE_TYPES = tuple(typing.get_args(wire.ServerEvent))
_PLAIN = {int: 1, float: 1.5, str: "x", bool: True}


def _value(hint: Any) -> Any:
    """A value of the field's type: the first choice of a union or a Literal, a nested
    dataclass built the same way, an empty container."""
    if hint in _PLAIN:
        return _PLAIN[hint]
    origin = typing.get_origin(hint)
    if origin is typing.Literal:
        return typing.get_args(hint)[0]
    if origin in (typing.Union, types.UnionType):
        return _value(next(a for a in typing.get_args(hint) if a is not type(None)))
    if origin in (tuple, list, dict) or hint in (tuple, list, dict):
        return (origin or hint)()
    if origin is not None and origin.__name__ == "Mapping":
        return {}
    if is_dataclass(hint):
        return _sample(hint)
    if hint.__module__ == "numpy":
        import numpy as np

        return np.zeros(1920, dtype=np.float32)
    raise AssertionError(f"no sample value for {hint!r}")


def _sample(kind: Any) -> Any:
    hints = typing.get_type_hints(kind)
    return kind(**{f.name: _value(hints[f.name]) for f in fields(kind)
                   if f.default is MISSING and f.default_factory is MISSING})


@pytest.mark.parametrize("kind", EVENT_TYPES, ids=lambda k: k.__name__)
def test_each_event_is_a_jsonl_line_or_says_why_not(kind):
    written = kind in ONE_LINE or kind in GATHERED
    assert written != (kind in NOT_RECORDED), (
        f"{kind.__name__}: in run_records' ONE_LINE or GATHERED, or in NOT_RECORDED with "
        "its reason (exactly one)")
    recorder = RunRecorder("input.wav", 10, "replay", None)
    lines = recorder.records(_sample(kind), 3)
    assert all(type(r) in RECORD_TYPES.values() for r in lines)
    for record in lines:
        json.dumps(to_json_object(record))
    if kind in NOT_RECORDED:
        assert lines == []


@pytest.mark.parametrize("kind", EVENT_TYPES, ids=lambda k: k.__name__)
def test_each_event_is_a_wire_line_or_says_why_not(kind):
    assert (kind in WIRE_LINES) != (kind in NOT_ON_THE_WIRE), (
        f"{kind.__name__}: in event_mapping's WIRE_LINES, or in NOT_ON_THE_WIRE with its "
        "reason (exactly one)")
    lines = WireMapper().map(_sample(kind))
    assert all(isinstance(line, WIRE_TYPES) for line in lines)
    for line in lines:
        wire.encode_event(line)
    if kind in NOT_ON_THE_WIRE:
        assert lines == []


@pytest.mark.parametrize("kind", WIRE_TYPES, ids=lambda k: k.__name__)
def test_each_wire_event_is_read_back_or_says_why_not(kind):
    """The thin client reads the server's wire back into the conversation's events
    (app/remote/engine_events.py), one table too."""
    assert (kind in ENGINE_EVENTS_OF) != (kind in NOT_ENGINE_EVENTS), (
        f"{kind.__name__}: in engine_events' ENGINE_EVENTS_OF, or in NOT_ENGINE_EVENTS with "
        "its reason (exactly one)")
    events = EngineEventMapper(asr=True).map(_sample(kind))
    assert all(isinstance(event, EVENT_TYPES) for event in events)
    if kind in NOT_ENGINE_EVENTS:
        assert events == []


def test_the_tables_name_only_the_conversations_events():
    """A table entry for a type no union has is an event nobody emits (or one the unions
    forgot): either way a reader of the unions would not know it."""
    named = set(ONE_LINE) | set(GATHERED) | set(NOT_RECORDED) | set(WIRE_LINES) | set(
        NOT_ON_THE_WIRE)
    assert named <= set(EVENT_TYPES), sorted(k.__name__ for k in named - set(EVENT_TYPES))
    read_back = set(ENGINE_EVENTS_OF) | set(NOT_ENGINE_EVENTS)
    assert read_back <= set(WIRE_TYPES), sorted(k.__name__ for k in read_back - set(WIRE_TYPES))
