"""A sample's `result_<provider>.json`, made from its run's JSONL transcript and its input.

The keys the benchmark's evaluators read are there, as its runner writes them:
`example_id`, `actual_tool_calls` [{function, args, timestamp_start}], `transcript` (the
agent's words), `asr_chunks` [{text, timestamp: [start, end]}], `user_speech_end_rel` and
`audio_agent_speech_start` (seconds from the input's start). How each is had here:
- a call is one the LLM made of the benchmark's tools that the tool answered (as the
  benchmark's agent logs a call once its tool has run; the others are kept apart in
  `failed_tool_calls`, with their `error`); its `args` are those the benchmark's typed
  function would have received (typed_arguments.py: converted to the tool's types, its
  defaults filled), `llm_args` as the LLM wrote them; `timestamp_start` is when its answer
  reached the speech model (the span of the turn that made it landed), as the Context
  Spanning reference records it, else when it was made; `called_at` is when it was made
  (conversation time);
- the agent's words are the speech model's own text stream (its inner monologue is what it
  says; the benchmark runs an ASR on the reply audio instead), a word's time that of its
  first text piece;
- the user's speech ends where the input's first turn does, read as the benchmark reads it
  from an ASR's word times: the end of the first word followed by more than 2 s without
  one, else of the last word; here the words the run's recogniser heard in the input (the
  `user` records' words), not the loudness (a noisy recording is loud to its end).
Extra keys say what else a reader needs (the model, the run's transcript file).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from app.conversation.run_records import (
    EndRecord,
    ErrorRecord,
    RunRecord,
    SpanQueuedRecord,
    SpanRecord,
    TextRecord,
    ToolCallRecord,
    UserRecord,
    of_type,
)
from app.eval.fdb3.typed_arguments import typed_arguments
from app.eval.qa_events import strip_markers
from app.frames import FRAME_S, SAMPLE_RATE

VOICED_DBFS = -45.0
TURN_GAP_S = 2.0  # the benchmark's: a pause this long ends the user's first turn


def voiced_end(pcm: np.ndarray, rate: int = SAMPLE_RATE) -> float | None:
    """Seconds from the start to the end of the first stretch of 20 ms frames louder than
    -45 dBFS followed by 2 s quieter, else of the last; None when silent. Only where a time
    must be had before the run (a forced <ret>): the result's user end is from words."""
    window = int(0.02 * rate)
    frames = len(pcm) // window
    if frames == 0:
        return None
    blocks = np.asarray(pcm[: frames * window], np.float64).reshape(frames, window)
    rms = np.sqrt(np.mean(blocks ** 2, axis=1))
    voiced = np.flatnonzero(20.0 * np.log10(np.maximum(rms, 1e-10)) > VOICED_DBFS)
    if voiced.size == 0:
        return None
    gaps = np.flatnonzero(np.diff(voiced) * 0.02 > TURN_GAP_S)
    last = voiced[gaps[0]] if gaps.size else voiced[-1]
    return round((last + 1) * 0.02, 3)


def user_turns(records: Sequence[RunRecord]) -> list[UserRecord]:
    """The user's turns the recogniser ended with words (each one asked the LLM)."""
    return [r for r in of_type(records, UserRecord) if r.text.strip()]


def user_words(records: Sequence[RunRecord], until_s: float | None = None
               ) -> list[tuple[str, float, float]]:
    """The words the recogniser heard, (text, start, end) in order; `until_s`: those that
    start before then (the input's, not the silence after it)."""
    words = [w for r in of_type(records, UserRecord) for w in r.words or ()]
    return [w for w in sorted(words, key=lambda w: w[1])
            if until_s is None or w[1] < until_s]


def user_speech_end(words: Sequence[tuple[str, float, float]]) -> float | None:
    """The end of the user's first turn as the benchmark reads it from ASR words: the end
    of the first word followed by a gap of more than 2 s, else the last word's; None
    without words."""
    for (_, _, end), (_, next_start, _) in zip(words, words[1:], strict=False):
        if next_start - end > TURN_GAP_S:
            return round(end, 3)
    return round(words[-1][2], 3) if words else None


def agent_words(records: Sequence[RunRecord]) -> list[dict[str, Any]]:
    """The model's words, each with the time its first and last pieces came."""
    words: list[dict[str, Any]] = []
    current, start, end = "", 0.0, 0.0
    for record in of_type(records, TextRecord):
        time_s = float(record.time)
        for char in record.text:
            if char.isspace():
                if current:
                    words.append({"text": current, "timestamp": [start, round(end, 3)]})
                current = ""
                continue
            if not current:
                start = round(time_s, 3)
            current += char
            end = time_s + FRAME_S
    if current:
        words.append({"text": current, "timestamp": [start, round(end, 3)]})
    return [w for w in words if strip_markers(w["text"])]


def _landed_at(records: Sequence[RunRecord]) -> dict[int, float]:
    """turn id -> when its span reached the model (its last chunk), in seconds."""
    span_of_turn = {r.turn_id: r.span_id for r in of_type(records, SpanQueuedRecord)}
    landed = {}
    for record in of_type(records, SpanRecord):
        if record.landed_before is not None:
            landed[record.span_id] = record.landed_before * FRAME_S
    return {turn: round(landed[span], 3) for turn, span in span_of_turn.items()
            if span in landed}


def tool_calls(records: Sequence[RunRecord],
               schemas: Mapping[str, Mapping[str, Any]] | None = None) -> list[dict[str, Any]]:
    """The calls of the run; `schemas`: each function's input schema, which types its
    `args` as the benchmark's agent logs them."""
    landed = _landed_at(records)
    calls = []
    for record in of_type(records, ToolCallRecord):
        called_at = round(max(0, record.frame + 1) * FRAME_S, 3)
        function = record.server_tool or record.tool
        calls.append({
            "function": function,
            "args": typed_arguments(record.arguments, (schemas or {}).get(function)),
            "llm_args": dict(record.arguments),
            "timestamp_start": landed.get(int(record.turn_id or 0), called_at),
            "called_at": called_at, "ok": record.ok, "error": record.error,
            # No measured time here (the run log's `tool_call` has it): the same
            # conversation gives the same file on any machine.
            "result": record.result, "server": record.server})
    return calls


def make_result(example_id: str, speaker: str, scenario: dict, provider: str,
                records: Sequence[RunRecord], input_pcm: np.ndarray, extra: dict,
                schemas: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, Any]:
    words = agent_words(records)
    duration = len(input_pcm) / SAMPLE_RATE
    heard = user_words(records, duration)
    user_end = user_speech_end(heard)
    calls = tool_calls(records, schemas)
    result: dict[str, Any] = {
        "pid": speaker, "example_id": example_id,
        "category": scenario.get("domain", "unknown"), "title": scenario.get("title", ""),
        "provider": provider, "status": "completed",
        # The calls the tools answered, as the benchmark's agent logs a call once its tool
        # has run; those that failed before (refused, not running, bad arguments) beside.
        "actual_tool_calls": [c for c in calls if c["ok"]],
        "failed_tool_calls": [c for c in calls if not c["ok"]],
        "transcript": " ".join(w["text"] for w in words),
        "asr_chunks": words,
        "user_speech_end_rel": user_end,
        # What the user end was read from, as the benchmark's runner keeps its input ASR.
        "input_transcript": " ".join(w[0] for w in heard),
        "input_asr_chunks": [{"text": t, "timestamp": [start, end]}
                             for t, start, end in heard],
        "input_duration_s": round(duration, 3),
    }
    if words:
        result["audio_agent_speech_start"] = words[0]["timestamp"][0]
        if user_end is not None:
            result["perceived_total_latency"] = round(words[0]["timestamp"][0] - user_end, 3)
    end = next((r for r in reversed(records) if isinstance(r, (EndRecord, ErrorRecord))), None)
    if isinstance(end, ErrorRecord):
        result["status"] = "run_error"
        result["error"] = end.message
    result["contextspan"] = extra
    return result
