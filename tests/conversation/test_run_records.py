"""A run's JSONL records (app/conversation/run_records.py): what each event writes, read back
as the same typed record; a transcript written before the records were typed still reads,
line for line; a newer run's unknown record is skipped by the readers or named as an error.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from app.asr import events as asr
from app.conversation.run_records import (
    RECORD_TYPES,
    EndRecord,
    ErrorRecord,
    LateRecord,
    LinkRecord,
    NoticeRecord,
    RecordError,
    RetRecord,
    RunRecorder,
    RunStarted,
    SpanRecord,
    TextRecord,
    ToolCallRecord,
    from_record,
    of_type,
    read_records,
    read_transcript,
    to_record,
)
from app.cuts import Cut
from app.engine import events as ev
from app.orchestrator import events as oe
from app.server.event_mapping import WireMapper
from app.wire.events import encode_event
from app.wire.named_json import to_json_object

FIXTURES = Path(__file__).parent / "run_records"
CUT = Cut("the LLM's reply", 2_000, 1_536, "characters", "the span's 1,536-character bound")
USAGE = ev.ContextUsage(375, 120, 100, 20, 20, False)

# One of each event a run hears, in an order a run could hear them (span 4 lands, span 5's
# input ends after its first chunk).
RUN_EVENTS: list[object] = [
    ev.EngineReady("tiny-cs", "cpu", "float32", 128, 41.5, 80.0, 375, 54, 300),
    ev.AudioOut(0, np.zeros(1920, np.float32)),
    ev.FrameStats(0, 40.0, 0.0, USAGE),
    ev.TextPiece(3, " hello", 17),
    asr.AsrWord("capital", 1.0, 1.4),
    asr.AsrPartial("capital", 1.0, 1.4),
    asr.AsrFinal("capital of peru", 1.0, 2.25, "vad", 2.5),
    asr.AsrError("the recogniser's queue is full", fatal=False),
    ev.RetToken(52),
    oe.RetrievalQuestion(1, 52, "capital of peru", "cache", 12.345),
    oe.RetrievalIgnored(60, "a retrieval is already running"),
    oe.TurnStarted(1, "capital of peru", "ret"),
    oe.LlmStatus("thinking", "asking the LLM"),
    oe.ToolCalled(1, "calculator", {"expression": "6*7"}, True, None, "calculator", 8, False,
                  (CUT,), result="6*7 = 42", elapsed_ms=3.25),
    oe.ToolWaiting(1, "write_file", "files", "I need your permission first.", 3),
    oe.SpanQueued(1, 4, "Lima is the capital.", "llm+calculator", (CUT,)),
    ev.SpanAccepted(4, "llm+calculator", "Lima is the capital.", 9, True, 12, 9),
    ev.SpanChunkInjected(4, "llm+calculator", 66, 9, 0, 12.18949),
    ev.BlockSlot(4, 66, 9, 12.18949, 92.9744, 105.16389, True),
    ev.SpanInjected(4, "llm+calculator", 66, 66, 9, 1, origin_frame=52),
    ev.FirstAudioAfterSpan(4, 66, 1.0),
    oe.TurnLatency(1, None, 100.0, 250.5, 13.456, 80.0, None),
    oe.NoSpan(2, 70, "and bolivia", "the LLM found no information"),
    oe.RetrievalLate(3, 80, "and chile", 3.1, "llm", "Santiago."),
    ev.SpanLate(6, "llm", "Santiago.", 80, 112, 2.56),
    ev.SpanRejected(7, "cli", "the span is empty"),
    oe.AnswerNotInjected(8, "La Paz.", "llm", "the conversation is ending"),
    oe.TurnFailed(9, "timeout", "no answer in 20 s"),
    oe.TurnCancelled(10, "the user spoke again"),
    oe.LlmStatus("error", "the LLM is not running"),
    ev.SpanAccepted(5, "notes", "A long note.", 40, False, 40, 40),
    ev.SpanChunkInjected(5, "notes", 90, 8, 0, 5.0),
    ev.EngineStopped(120, "end of input"),
]


def recorded(events: list[object]) -> list[object]:
    recorder = RunRecorder("question.wav", 120, "replay (LLM latency in frames)", "ret_token")
    records: list[object] = []
    for event in events:
        records += recorder.records(event, 50)
    return records + recorder.unfinished()


def test_every_record_type_reads_back_as_the_record_that_was_written():
    written = recorded(RUN_EVENTS) + [
        LinkRecord("opus", 1_000, 2_000, 12.5, 25.0, 80.5, None, 1, 3, 0),
        EndRecord(120, "end of input"), ErrorRecord("the disk is full", 90)]
    assert {type(r) for r in written} == set(RECORD_TYPES.values())  # each type at least once
    for record in written:
        line = json.dumps(to_json_object(record), ensure_ascii=False)
        assert from_record(json.loads(line)) == record


def test_each_event_writes_the_line_a_reader_of_the_run_finds():
    lines = [to_json_object(r) for r in recorded(RUN_EVENTS)]
    kinds = [line["type"] for line in lines]
    assert kinds == ["run", "text", "user", "notice", "ret", "question", "ret_ignored", "turn",
                     "tool_call", "tool_waiting", "span_queued", "notice", "slot", "span",
                     "latency", "no_span", "late", "late", "notice", "notice", "notice",
                     "turn_cancelled", "llm_status", "span"]
    by_kind = dict(zip(kinds, lines, strict=True))  # the last of each kind
    assert lines[0]["input"] == "question.wav" and lines[0]["trigger"] == "ret_token"
    assert lines[7] == {"type": "turn", "turn_id": 1, "question": "capital of peru",
                        "trigger": "ret", "frame": 50}  # the conversation's clock
    assert lines[8]["cuts"] == [CUT.describe()] and lines[8]["frame"] == 50
    landed = lines[13]
    assert landed == {"type": "span", "span_id": 4, "source": "llm+calculator",
                      "text": "Lima is the capital.", "positions": 9,
                      "chunks": [{"before_frame": 66, "k": 9, "prefill_ms": 12.189}],
                      "truncated": True, "ret_frame": 52, "latency_from_ret_s": 1.12}
    assert lines[12]["total_ms"] == 105.164
    # A turn's late answer and a span's late answer: each with the fields it has.
    assert lines[16] == {"type": "late", "turn_id": 3, "ret_frame": 80, "question": "and chile",
                         "seconds": 3.1, "source": "llm", "dropped_by": "orchestrator"}
    assert lines[17] == {"type": "late", "span_id": 6, "ret_frame": 80, "text": "Santiago.",
                         "seconds": 2.56, "source": "llm", "dropped_by": "engine"}
    assert lines[18] == {"type": "notice", "span_id": 7,
                         "message": "span 7 from cli was not injected: the span is empty"}
    assert by_kind["llm_status"]["message"] == "the LLM is not running"  # errors only
    assert lines[-1]["complete"] is False and len(lines[-1]["chunks"]) == 1


def test_a_transcript_written_before_the_records_were_typed_still_reads():
    for name in ("tool_and_spans", "late_answer"):
        path = FIXTURES / f"{name}.jsonl"
        records = read_transcript(path)
        lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        # Line for line the same object, its keys in the same order.
        assert [list(to_json_object(r).items()) for r in records] == [
            list(line.items()) for line in lines]
    records = read_transcript(FIXTURES / "tool_and_spans.jsonl")
    head = records[0]
    assert isinstance(head, RunStarted) and head.model == "tiny-cs" and head.frames == 92
    call = of_type(records, ToolCallRecord)[0]
    assert call.tool == "calculator" and call.arguments == {"expression": "6*7"} and call.ok
    spans = of_type(records, SpanRecord)
    assert [s.source for s in spans] == ["notes", "llm+calculator"]
    assert spans[1].ret_frame == 53 and spans[1].landed_before == 66
    assert of_type(records, RetRecord)[0].frame == 53
    assert isinstance(records[-1], EndRecord) and records[-1].frames == 92
    late = of_type(read_transcript(FIXTURES / "late_answer.jsonl"), LateRecord)
    assert len(late) == 1 and late[0].turn_id == 1 and late[0].span_id is None
    assert late[0].dropped_by == "orchestrator" and late[0].seconds > 2.5


def test_a_newer_runs_record_is_skipped_by_readers_or_named():
    lines = ['{"type": "run", "model": "tiny", "frames": 3, "a_newer_field": 1}',
             '{"type": "hologram", "frame": 2}', "",
             '{"type": "text", "frame": 1, "time": 0.08, "text": "hi"}']
    records = read_records(lines)
    assert records == [RunStarted(model="tiny", frames=3), TextRecord(1, 0.08, "hi")]
    with pytest.raises(RecordError, match="unknown record type 'hologram'"):
        read_records(lines, skip_unknown=False)
    with pytest.raises(RecordError, match="a record is a JSON object"):
        read_records(["[1, 2]"])


def test_a_record_missing_fields_reads_with_their_defaults():
    """An older run, or one written by hand, may lack fields added since."""
    span = from_record({"type": "span", "span_id": 7, "chunks": [{"before_frame": 61}]})
    assert isinstance(span, SpanRecord) and span.landed_before == 61 and span.text == ""
    assert from_record({"type": "notice"}) == NoticeRecord(message="")


def test_the_wire_and_the_jsonl_name_an_event_alike():
    """The server's wire and the run's JSONL write the same events under the same names,
    through the same serialiser; a field both carry has the same value (the wire's slot
    rounds its milliseconds to 0.1, the JSONL's to 0.001: the slot is compared by name)."""
    both = [ev.RetToken(52), oe.NoSpan(2, 70, "and bolivia", "nothing found"),
            oe.RetrievalLate(3, 80, "and chile", 3.1, "llm"),
            ev.BlockSlot(4, 66, 9, 12.18949, 92.9744, 105.16389, True),
            ev.TextPiece(3, " hello", 17)]
    mapper = WireMapper()
    for event in both:
        (wire_line,) = [json.loads(encode_event(e)) for e in mapper.map(event)]
        jsonl_line = to_record(event, 50)
        assert jsonl_line is not None and wire_line["type"] == jsonl_line["type"]
        if wire_line["type"] in ("slot", "text"):
            continue
        shared = set(wire_line) & set(jsonl_line)
        assert len(shared) > 1
        assert {k: wire_line[k] for k in shared} == {k: jsonl_line[k] for k in shared}
