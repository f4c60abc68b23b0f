"""A headless run's output, the same for a local engine (headless.py) and a speech model on a
server (remote_run.py): the pipeline's events into the JSONL transcript and the reply audio,
while a feeder thread puts the input in.

The transcript is written beside its final name and renamed at the end; its last line is
"end" only when the whole run succeeded, otherwise "error" with the first reason.
"""

from __future__ import annotations

import json
import os
import queue
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, TextIO

import numpy as np

from app.audio_file import partial_path
from app.conversation.events import ConversationEvent
from app.conversation.pipeline import ConversationPipeline
from app.conversation.run_records import (
    EndRecord,
    ErrorRecord,
    NoticeRecord,
    RunRecord,
    RunRecorder,
    SpanRecord,
)
from app.conversation.run_request import HeadlessRunError
from app.engine import events as ev
from app.frames import FRAME_SAMPLES
from app.wire.named_json import to_json_object


def _write(out: TextIO, record: RunRecord) -> None:
    # The file is opened with errors="backslashreplace": a lone surrogate (odd bytes in an
    # argument or a file name) comes out as a JSON \\udcxx escape, never a failed run.
    out.write(json.dumps(to_json_object(record), ensure_ascii=False) + "\n")


def _close_transcript(out: TextIO, partial: Path, final: Path, unfinished: list[SpanRecord],
                      spans_pending: Callable[[], bool], stopped: ev.EngineStopped | None,
                      failure: list[str], done: int, frames: int,
                      finish: Callable[[], None] | None = None,
                      last_lines: Callable[[], list[RunRecord]] | None = None) -> None:
    """The transcript's last lines, then its final name.

    Spans the input ended in the middle of are recorded with the chunks that did land
    ("complete": false); a span still waiting is a notice. `finish` (writing the reply
    audio) runs once every frame came back, before the last line: the last line is "end"
    only when it all succeeded; otherwise "error" with the first reason."""
    try:
        for record in unfinished:
            _write(out, record)
        if stopped is not None and spans_pending():
            _write(out, NoticeRecord(message="the input ended before every queued span was "
                                             "injected"))
        if not failure and stopped is not None and done != frames:
            failure.append(f"the engine returned {done} of {frames} frames")
        if not failure and stopped is None:
            failure.append("the run stopped before the engine did")
        if not failure and finish is not None:
            try:
                finish()
            except Exception as exc:  # a full disk at the very end is still the run's failure
                failure.append(str(exc) or type(exc).__name__)
        for line in last_lines() if last_lines is not None else []:
            _write(out, line)
        if failure:
            _write(out, ErrorRecord(failure[0], done))
        else:
            assert stopped is not None
            _write(out, EndRecord(stopped.frames, stopped.reason))
    finally:
        out.close()
        os.replace(partial, final)


class FrameFeeder(Protocol):
    """What the follower asks of a feeder thread (a file into a local engine, or to a
    server: remote_run.py)."""

    failure: list[str]
    stopping: threading.Event

    def is_alive(self) -> bool: ...
    def stop(self, timeout: float) -> None: ...


class RunFollower:
    """The pipeline's events into the transcript and the reply audio."""

    def __init__(self, spans_pending: Callable[[], bool], pipeline: ConversationPipeline,
                 frames: int, header: dict[str, Any],
                 last_lines: Callable[[], list[RunRecord]] | None = None) -> None:
        """`spans_pending`: whether spans still wait to land (said at the end);
        `last_lines`: records written just before the last line."""
        self.spans_pending = spans_pending
        self.last_lines = last_lines
        self.pipeline = pipeline
        self.frames = frames
        self.header = header
        self.out_pcm = np.zeros(frames * FRAME_SAMPLES, dtype=np.float32)
        self.failure: list[str] = []
        self.recorder = RunRecorder(header["input"], frames, header["paced"], header["trigger"])
        self.text_parts: list[str] = []
        self.done = 0
        self.landed = 0
        self.last_frame = -1
        self.stopped: ev.EngineStopped | None = None

    def follow(self, transcript_path: Path, feeder: FrameFeeder, timeout_s: float,
               finish: Callable[[], None] | None = None) -> None:
        """Until the engine stops (or the feeder fails, or `timeout_s`), then `finish` (the
        reply audio). The transcript is written beside its final name and renamed at the
        end: a run that fails, in `finish` too, keeps what it wrote, closed by an "error"
        line, never an "end" line."""
        partial = partial_path(transcript_path)
        out = partial.open("w", encoding="utf-8", errors="backslashreplace")
        try:
            deadline = time.monotonic() + timeout_s
            while self.stopped is None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise HeadlessRunError(f"the run did not finish within {timeout_s:.0f} s")
                try:
                    event = self.pipeline.events.get(timeout=min(remaining, 1.0))
                except queue.Empty:
                    if feeder.failure and not feeder.is_alive():
                        break  # the input cannot go on: stop rather than wait for the deadline
                    continue
                self._on_event(event, out)
        except BaseException as exc:
            self.failure.insert(0, str(exc) or type(exc).__name__)
            raise
        finally:
            feeder.stopping.set()
            self.pipeline.stop(10.0)
            feeder.stop(10.0)
            self.failure.extend(feeder.failure)
            _close_transcript(out, partial, transcript_path, self.recorder.unfinished(),
                              self.spans_pending,
                              self.stopped, self.failure, self.done, self.frames, finish,
                              self.last_lines)

    def _on_event(self, event: ConversationEvent, out: TextIO) -> None:
        if isinstance(event, ev.AudioOut):
            first = event.frame_index * FRAME_SAMPLES
            self.out_pcm[first : first + FRAME_SAMPLES] = event.pcm
            self.done += 1
            self.last_frame = event.frame_index
        elif isinstance(event, ev.TextPiece):
            self.text_parts.append(event.text)
        elif isinstance(event, ev.SpanInjected):
            self.landed += 1
        elif isinstance(event, ev.EngineError):
            self.failure.append(event.message)
        elif isinstance(event, ev.EngineStopped):
            self.stopped = event
        for record in self.recorder.records(event, self.last_frame):
            _write(out, record)
