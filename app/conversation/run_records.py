"""A run's JSONL transcript (`python main.py run`, the evaluations) as named types, both ways.

The events of a conversation (app/engine/events.py, app/orchestrator/events.py,
app/asr/events.py) become records here and nowhere else: `RunRecorder.records` for a run
(it gathers a span's chunks into its one `span` record), `to_record` for an event that is
one line alone. `from_record` / `read_records` read a line back as its record type, an older
run's too: every field has a default, fields a type does not know are ignored. They are
written and read by the wire's serialiser (app/wire/named_json.py); the record names are the
wire's (`text`, `ret`, `question`, `span`, `no_span`, `late`, `slot`, `span_queued`), the
fields are the run's (frames, not wall time; why the wire's differ: docs/events.md).
Which events write no line, and why: `NOT_RECORDED`.

Times: `frame` is the conversation's clock (the newest frame out; in a replay, the frame a
turn was asked at), `time` that frame in seconds.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from app.asr import events as asr
from app.conversation.landing_spans import LandingSpan, LandingSpans
from app.engine import events as ev
from app.frames import FRAME_RATE, SAMPLE_RATE
from app.orchestrator import events as oe
from app.wire.named_json import (
    NamedJsonError,
    from_json_object,
    omitted_when_none,
    registry,
    to_json_object,
)


class RecordError(ValueError):
    """A line that is not a record this version reads."""


@dataclass(frozen=True)
class RunStarted:
    TYPE: ClassVar[str] = "run"
    model: str = ""
    device: str = ""
    dtype: str = ""
    input: str = ""
    frames: int = 0
    sample_rate: int = SAMPLE_RATE
    frame_rate: float = FRAME_RATE
    chunk_limit: int = 0
    step_ms: float | None = None
    context_window: int = 0
    prompt_frames: int = 0
    paced: str = ""
    trigger: str | None = None  # the checkpoint's retrieval trigger (None: no LLM side)


@dataclass(frozen=True)
class TextRecord:
    TYPE: ClassVar[str] = "text"
    frame: int = 0
    time: float = 0.0
    text: str = ""


@dataclass(frozen=True)
class ChunkRecord:
    before_frame: int = 0  # it landed before this frame
    k: int = 0
    prefill_ms: float = 0.0


_CHUNK_FIELDS = frozenset(f.name for f in fields(ChunkRecord))


@dataclass(frozen=True)
class SpanRecord:
    """A span that landed (or, `complete` False, whose input ended before all of it did)."""

    TYPE: ClassVar[str] = "span"
    span_id: int = 0
    source: str = ""
    text: str = ""
    positions: int = 0
    chunks: tuple[ChunkRecord, ...] = ()
    truncated: bool = False
    ret_frame: int | None = omitted_when_none()  # the <ret> it answers
    latency_from_ret_s: float | None = omitted_when_none()
    complete: bool | None = omitted_when_none()  # False: not every chunk landed

    def __post_init__(self) -> None:  # read from JSON, the chunks are objects
        object.__setattr__(self, "chunks", tuple(
            c if isinstance(c, ChunkRecord) else ChunkRecord(**{
                k: v for k, v in c.items() if k in _CHUNK_FIELDS}) for c in self.chunks))

    @property
    def landed_before(self) -> int | None:
        """The frame its last chunk landed before (None: no chunk landed)."""
        return self.chunks[-1].before_frame if self.chunks else None


@dataclass(frozen=True)
class NoticeRecord:
    TYPE: ClassVar[str] = "notice"
    span_id: int | None = omitted_when_none()
    turn_id: int | None = omitted_when_none()
    text: str | None = omitted_when_none()
    message: str = ""


@dataclass(frozen=True)
class SlotRecord:
    TYPE: ClassVar[str] = "slot"
    span_id: int = 0
    frame: int = 0
    positions: int = 0
    prefill_ms: float = 0.0
    step_ms: float = 0.0
    total_ms: float = 0.0
    over_budget: bool = False


@dataclass(frozen=True)
class UserRecord:
    TYPE: ClassVar[str] = "user"
    text: str = ""
    start: float = 0.0
    end: float = 0.0
    end_of_turn_by: str = ""
    detected_at: float = 0.0
    # Its words as [text, start, end] (seconds of user audio); none (left out): an older run,
    # or a turn without words.
    words: tuple[tuple[str, float, float], ...] | None = omitted_when_none()

    def __post_init__(self) -> None:  # read from JSON, the words are lists
        if self.words is not None:
            object.__setattr__(self, "words", tuple(
                (str(text), float(start), float(end)) for text, start, end in self.words))


@dataclass(frozen=True)
class RetRecord:
    TYPE: ClassVar[str] = "ret"
    frame: int = 0
    time: float = 0.0


@dataclass(frozen=True)
class TurnRecord:
    TYPE: ClassVar[str] = "turn"
    turn_id: int = 0
    question: str = ""
    trigger: str = ""
    frame: int = 0


@dataclass(frozen=True)
class QuestionRecord:
    TYPE: ClassVar[str] = "question"
    turn_id: int = 0
    ret_frame: int = 0
    question: str = ""
    plan: str = ""
    waited_ms: float = 0.0


@dataclass(frozen=True)
class ToolCallRecord:
    TYPE: ClassVar[str] = "tool_call"
    turn_id: int = 0
    tool: str = ""
    server: str = ""
    server_tool: str = ""
    arguments: Mapping[str, Any] = field(default_factory=dict)
    ok: bool = False
    error: str | None = None
    source: str = ""
    chars: int = 0
    truncated: bool = False
    cuts: tuple[str, ...] = ()  # each cut as Cut.describe() says it
    result: str = ""
    elapsed_ms: float | None = None
    frame: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "cuts", tuple(self.cuts))


@dataclass(frozen=True)
class ToolWaitingRecord:
    TYPE: ClassVar[str] = "tool_waiting"
    turn_id: int = 0
    tool: str = ""
    server: str = ""
    text: str = ""
    span_id: int | None = None


@dataclass(frozen=True)
class SpanQueuedRecord:
    TYPE: ClassVar[str] = "span_queued"
    turn_id: int = 0
    span_id: int = 0
    text: str = ""
    source: str = ""
    cuts: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "cuts", tuple(self.cuts))


@dataclass(frozen=True)
class LatencyRecord:
    """oe.TurnLatency's fields, in milliseconds."""

    TYPE: ClassVar[str] = "latency"
    turn_id: int = 0
    end_of_speech_to_turn_ms: float | None = None
    turn_to_first_token_ms: float | None = None
    first_token_to_span_ready_ms: float | None = None
    span_ready_to_injected_ms: float | None = None
    injected_to_first_audio_ms: float | None = None
    end_of_speech_to_first_audio_ms: float | None = None


@dataclass(frozen=True)
class TurnCancelledRecord:
    TYPE: ClassVar[str] = "turn_cancelled"
    turn_id: int = 0
    reason: str = ""


@dataclass(frozen=True)
class LlmErrorRecord:
    TYPE: ClassVar[str] = "llm_status"
    state: str = "error"
    message: str = ""


@dataclass(frozen=True)
class RetIgnoredRecord:
    TYPE: ClassVar[str] = "ret_ignored"
    ret_frame: int = 0
    reason: str = ""


@dataclass(frozen=True)
class NoSpanRecord:
    TYPE: ClassVar[str] = "no_span"
    turn_id: int = 0
    ret_frame: int = 0
    question: str = ""
    reason: str = ""


@dataclass(frozen=True)
class LateRecord:
    """An answer dropped as late: by the orchestrator (a turn's, `turn_id` and `question`)
    or by the engine (a span's, `span_id` and `text`)."""

    TYPE: ClassVar[str] = "late"
    turn_id: int | None = omitted_when_none()
    span_id: int | None = omitted_when_none()
    ret_frame: int = 0
    question: str | None = omitted_when_none()
    text: str | None = omitted_when_none()
    seconds: float = 0.0
    source: str = ""
    dropped_by: str = ""  # "orchestrator" or "engine"


@dataclass(frozen=True)
class LinkRecord:
    """What a run on a speech server's link carried (conversation/remote_run.py)."""

    TYPE: ClassVar[str] = "link"
    audio_codec: str = ""
    bytes_sent: int = 0
    bytes_received: int = 0
    kbit_s_up: float = 0.0
    kbit_s_down: float = 0.0
    frame_rtt_ms: float | None = None
    network_rtt_ms: float | None = None
    late_frames: int = 0
    most_in_flight: int = 0
    frames_not_sent: int = 0
    # The kbit/s each way in its streams: "audio", "text" (the model's and the user's words,
    # and spans), "control" (the rest of the JSON).
    kbit_s_up_by_stream: dict[str, float] = field(default_factory=dict)
    kbit_s_down_by_stream: dict[str, float] = field(default_factory=dict)
    stalls: int = 0  # times the server went silent for 2 s or more (a stalled network)
    longest_stall_s: float = 0.0


@dataclass(frozen=True)
class EndRecord:
    """The last line of a run that succeeded."""

    TYPE: ClassVar[str] = "end"
    frames: int = 0
    reason: str = ""


@dataclass(frozen=True)
class ErrorRecord:
    """The last line of a run that failed: the first reason."""

    TYPE: ClassVar[str] = "error"
    message: str = ""
    frames: int = 0


RunRecord = (
    RunStarted | TextRecord | SpanRecord | NoticeRecord | SlotRecord | UserRecord | RetRecord
    | TurnRecord | QuestionRecord | ToolCallRecord | ToolWaitingRecord | SpanQueuedRecord
    | LatencyRecord | TurnCancelledRecord | LlmErrorRecord | RetIgnoredRecord | NoSpanRecord
    | LateRecord | LinkRecord | EndRecord | ErrorRecord
)
RECORD_TYPES: dict[str, type[RunRecord]] = registry((
    RunStarted, TextRecord, SpanRecord, NoticeRecord, SlotRecord, UserRecord, RetRecord,
    TurnRecord, QuestionRecord, ToolCallRecord, ToolWaitingRecord, SpanQueuedRecord,
    LatencyRecord, TurnCancelledRecord, LlmErrorRecord, RetIgnoredRecord, NoSpanRecord,
    LateRecord, LinkRecord, EndRecord, ErrorRecord))


# ---- events -> records -------------------------------------------------------------------

def _frame_time(frame: int) -> float:
    return round(frame / FRAME_RATE, 3)


def _user(e: asr.AsrFinal, frame: int) -> RunRecord:
    return UserRecord(e.text, round(e.start_s, 3), round(e.end_s, 3), e.detected_by,
                      round(e.detected_at_s, 3),
                      tuple((w.text, round(w.start_s, 3), round(w.end_s, 3)) for w in e.words)
                      or None)


def _tool_call(e: oe.ToolCalled, frame: int) -> RunRecord:
    return ToolCallRecord(e.turn_id, e.tool, e.server, e.server_tool, dict(e.arguments), e.ok,
                          e.error, e.source, e.chars, e.truncated,
                          tuple(cut.describe() for cut in e.cuts), e.result, e.elapsed_ms,
                          frame)


def _slot(e: ev.BlockSlot, frame: int) -> RunRecord:
    return SlotRecord(e.span_id, e.frame_index, e.positions, round(e.prefill_ms, 3),
                      round(e.step_ms, 3), round(e.total_ms, 3), e.over_budget)


def _llm_status(e: oe.LlmStatus, frame: int) -> RunRecord | None:
    return LlmErrorRecord(e.state, e.message) if e.state == "error" else None


# One line per event, whatever came before: the event's type -> its record (None: no line).
ONE_LINE: dict[type, Callable[[Any, int], RunRecord | None]] = {
    asr.AsrFinal: _user,
    asr.AsrError: lambda e, frame: NoticeRecord(
        message=f"speech recognition: {e.message}"),
    ev.TextPiece: lambda e, frame: TextRecord(e.frame_index, _frame_time(e.frame_index),
                                              e.text),
    ev.SpanRejected: lambda e, frame: NoticeRecord(
        span_id=e.span_id,
        message=f"span {e.span_id} from {e.source} was not injected: {e.reason}"),
    ev.SpanLate: lambda e, frame: LateRecord(
        span_id=e.span_id, ret_frame=e.origin_frame, text=e.text, seconds=e.seconds,
        source=e.source, dropped_by="engine"),
    ev.RetToken: lambda e, frame: RetRecord(e.frame_index, _frame_time(e.frame_index)),
    ev.BlockSlot: _slot,
    oe.TurnStarted: lambda e, frame: TurnRecord(e.turn_id, e.question, e.trigger, frame),
    oe.ToolCalled: _tool_call,
    oe.ToolWaiting: lambda e, frame: ToolWaitingRecord(e.turn_id, e.tool, e.server, e.text,
                                                       e.span_id),
    oe.SpanQueued: lambda e, frame: SpanQueuedRecord(
        e.turn_id, e.span_id, e.text, e.source, tuple(cut.describe() for cut in e.cuts)),
    oe.AnswerNotInjected: lambda e, frame: NoticeRecord(
        turn_id=e.turn_id, text=e.text,
        message=f"the LLM's answer was not injected: {e.reason}"),
    oe.TurnLatency: lambda e, frame: LatencyRecord(**vars(e)),
    oe.TurnFailed: lambda e, frame: NoticeRecord(turn_id=e.turn_id,
                                                 message=f"LLM {e.kind}: {e.message}"),
    oe.TurnCancelled: lambda e, frame: TurnCancelledRecord(e.turn_id, e.reason),
    oe.LlmStatus: _llm_status,
    oe.RetrievalQuestion: lambda e, frame: QuestionRecord(e.turn_id, e.ret_frame, e.question,
                                                          e.plan, e.waited_ms),
    oe.RetrievalIgnored: lambda e, frame: RetIgnoredRecord(e.ret_frame, e.reason),
    oe.NoSpan: lambda e, frame: NoSpanRecord(e.turn_id, e.ret_frame, e.question, e.reason),
    oe.RetrievalLate: lambda e, frame: LateRecord(
        turn_id=e.turn_id, ret_frame=e.ret_frame, question=e.question, seconds=e.seconds,
        source=e.source, dropped_by="orchestrator"),
}


# The conversation's events that are no line of their own in a run's JSONL, and why.
NOT_RECORDED: dict[type, str] = {
    ev.AudioOut: "the run's reply audio (--output)",
    ev.FrameStats: "the engine's frame timings, which the benchmarks read",
    ev.FirstAudioAfterSpan: "the turn's `latency` line times it",
    ev.EngineError: "the run's last line, `error`",
    ev.EngineStopped: "the run's last line, `end` or `error`",
    asr.AsrWord: "the utterance's final `user` line says its words",
    asr.AsrPartial: "the utterance's final `user` line",
}


def record_of(event: object, frame: int) -> RunRecord | None:
    """The line of an event that is one line alone (None: it writes none, or it is one of a
    span's, which RunRecorder gathers). `frame`: the conversation's clock."""
    make = ONE_LINE.get(type(event))
    return make(event, frame) if make is not None else None


def to_record(event: object, frame: int) -> dict[str, Any] | None:
    """record_of's line as its JSON object."""
    record = record_of(event, frame)
    return None if record is None else to_json_object(record)


class RunRecorder:
    """A run's events as its records, in order: the engine's readiness is the `run` line
    (with what the run says of itself), a span's chunks are gathered into its `span` line
    when it lands (app/conversation/landing_spans.py); every other event is `record_of`'s."""

    def __init__(self, input_name: str, frames: int, paced: str, trigger: str | None) -> None:
        self.input_name = input_name
        self.frames = frames
        self.paced = paced
        self.trigger = trigger
        self._spans = LandingSpans()

    def records(self, event: object, frame: int) -> list[RunRecord]:
        gather = GATHERED.get(type(event))
        if gather is not None:
            return gather(self, event)
        record = record_of(event, frame)
        return [] if record is None else [record]

    def _ready(self, event: ev.EngineReady) -> list[RunRecord]:
        return [RunStarted(event.model_id, event.device, event.dtype, self.input_name,
                           self.frames, SAMPLE_RATE, FRAME_RATE, event.chunk_limit,
                           event.step_ms, event.context_window, event.prompt_frames,
                           self.paced, self.trigger)]

    def _accepted(self, event: ev.SpanAccepted) -> list[RunRecord]:
        self._spans.accepted(event)
        if not event.truncated:
            return []
        return [NoticeRecord(
            span_id=event.span_id,
            message=f"span {event.span_id} from {event.source} was truncated: "
                    f"{event.kept_content_tokens} of {event.original_content_tokens} "
                    "tokens kept")]

    def _chunk(self, event: ev.SpanChunkInjected) -> list[RunRecord]:
        self._spans.chunk(event)
        return []

    def _landed(self, event: ev.SpanInjected) -> list[RunRecord]:
        span = self._spans.landed(event.span_id)
        if span is None:
            return []
        record = _span_record(span)
        if event.origin_frame is not None:
            record = replace(record, ret_frame=event.origin_frame, latency_from_ret_s=round(
                (event.last_frame - event.origin_frame) / FRAME_RATE, 3))
        return [record]

    def unfinished(self) -> list[SpanRecord]:
        """Spans the input ended in the middle of: the chunks that did land."""
        return [replace(_span_record(span), complete=False)
                for span in self._spans.unfinished()]


def _span_record(span: LandingSpan) -> SpanRecord:
    accepted = span.accepted
    return SpanRecord(accepted.span_id, accepted.source, accepted.text, accepted.tokens,
                      tuple(ChunkRecord(c.before_frame, c.k, round(c.prefill_ms, 3))
                            for c in span.chunks), accepted.truncated)


# The events whose line depends on what came before: the event's type -> the recorder's
# handler (every other event is one line alone, `ONE_LINE`'s).
GATHERED: dict[type, Callable[[RunRecorder, Any], list[RunRecord]]] = {
    ev.EngineReady: RunRecorder._ready,
    ev.SpanAccepted: RunRecorder._accepted,
    ev.SpanChunkInjected: RunRecorder._chunk,
    ev.SpanInjected: RunRecorder._landed,
}


# ---- records <- lines --------------------------------------------------------------------

def from_record(obj: Mapping[str, Any]) -> RunRecord:
    """A record from its JSON object; RecordError for a type this version does not know."""
    try:
        record = from_json_object(obj, RECORD_TYPES)
    except (NamedJsonError, TypeError) as exc:
        raise RecordError(f"not a {obj.get('type')!r} record: {exc}") from exc
    if record is None:
        raise RecordError(f"unknown record type {str(obj.get('type'))[:40]!r}")
    return record


def read_records(lines: Iterable[str | Mapping[str, Any]],
                 skip_unknown: bool = True) -> list[RunRecord]:
    """A transcript's records (its lines, or their objects). A record type this version
    does not know (a newer run's) is skipped, or with `skip_unknown` False a RecordError."""
    records: list[RunRecord] = []
    for line in lines:
        if isinstance(line, str):
            if not line.strip():
                continue
            obj = json.loads(line)
        else:
            obj = line
        if not isinstance(obj, Mapping):
            raise RecordError(f"a record is a JSON object, not {str(obj)[:40]}")
        if skip_unknown and str(obj.get("type", "")) not in RECORD_TYPES:
            continue
        records.append(from_record(obj))
    return records


def read_transcript(path: Path) -> list[RunRecord]:
    """A run's JSONL transcript, as records."""
    return read_records(Path(path).read_text(encoding="utf-8").splitlines())


R = TypeVar("R")


def of_type(records: Iterable[RunRecord], kind: type[R]) -> list[R]:
    """The records of one type, in order."""
    return [r for r in records if isinstance(r, kind)]
