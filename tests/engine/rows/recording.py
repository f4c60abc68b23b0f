"""Recording what reaches the temporal transformer, per conversation: on a one-row engine of
its own, and on a row of an engine of several.

As in tests/engine/test_column_exact_conversation.py, `LMModel.forward_text` is wrapped and
every column it is fed is recorded. In the batched engine a forward is either the batched
step (batch B, one column, the rows that execute are the exec_mask's) or a forward for one
row (batch 1, on the state's copy the row was loaded into). Each
generator's `step` is wrapped too, for the frames it returns. A row's record is cut at each
reset of that row: one segment per conversation that held it. A forward for one row is
recognised by the runtime's `row_reading()` (the row loaded into the shared copy).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from app.checkpoints.catalog import get_manifest
from app.checkpoints.loader import LoadedCheckpoint, load_checkpoint
from app.engine import events as ev
from app.engine.local_engine import LocalEngine, open_conversation
from app.engine.speech_engine import EngineOptions
from app.frames import FRAME_SAMPLES
from app.moshi_internals import streaming_state
from tests.queues import drain

TIMED = (ev.FrameStats, ev.BlockSlot, ev.EngineReady)  # carry timings: compared without them


@dataclass
class Conversation:
    """One conversation's record: columns fed, frames out, and its events."""

    fed: list[list[int]] = field(default_factory=list)
    forwards: list[tuple[int, int]] = field(default_factory=list)  # (batch, positions)
    frames: list[list[int] | None] = field(default_factory=list)
    events: list[object] = field(default_factory=list)


def load(folder: Path, model: str) -> LoadedCheckpoint:
    return load_checkpoint(get_manifest(model), folder, device="cpu")


def speech(seed: int, frames: int) -> np.ndarray:
    """A conversation's own 'speech': noise of its own seed, shaped by a slow tone."""
    rng = np.random.default_rng(seed)
    t = np.arange(frames * FRAME_SAMPLES) / 24000.0
    tone = 0.2 * np.sin(2 * np.pi * (180 + 40 * seed) * t)
    return (tone + rng.normal(0, 0.05, t.size)).astype(np.float32)


def frames_of(pcm: np.ndarray) -> list[np.ndarray]:
    return [pcm[i:i + FRAME_SAMPLES] for i in range(0, pcm.size, FRAME_SAMPLES)]


PCM_TOLERANCE = 1e-5  # batched Mimi sums its convolutions in another order than batch 1


def comparable(events: list[object]) -> list[object]:
    """Events without their clocks (timing fields differ between two runs) and without
    their PCM (compared by `assert_same_audio`)."""
    out: list[object] = []
    for e in events:
        if isinstance(e, TIMED):
            out.append(type(e).__name__)
        elif isinstance(e, ev.AudioOut):
            out.append(("audio", e.frame_index))
        elif isinstance(e, (ev.SpanInjected, ev.RetToken, ev.FirstAudioAfterSpan)):
            fields = {k: v for k, v in vars(e).items() if k != "monotonic_s"}
            out.append((type(e).__name__, tuple(sorted(fields.items()))))
        elif isinstance(e, ev.SpanChunkInjected):
            out.append(("chunk", e.span_id, e.before_frame, e.k, e.chunk_index))
        else:
            out.append(e)
    return out


def run_alone(folder: Path, model: str, options: EngineOptions, pcm: np.ndarray,
              spans: dict[int, str]) -> Conversation:
    """The conversation on a one-row engine of its own, recorded."""
    ck = load(folder, model)
    lm = ck.lm
    record = Conversation()
    on = {"on": False}
    forward_text = lm.forward_text

    def recorded(sequence: torch.Tensor, *args):
        if on["on"]:
            record.fed.extend(sequence[0, :, i].tolist() for i in range(sequence.shape[-1]))
            record.forwards.append((sequence.shape[0], sequence.shape[-1]))
        return forward_text(sequence, *args)

    lm.forward_text = recorded  # type: ignore[method-assign,assignment]
    engine = open_conversation(ck, options)
    local = engine.engine
    reset, step = local.runtime.reset_row, local.step_rows

    def recorded_reset(row: int) -> None:  # the last before the conversation: warm-up gone
        reset(row)
        record.fed.clear()
        record.forwards.clear()
        record.frames.clear()
        on["on"] = True

    def recorded_step(*args, **kwargs):
        outs = step(*args, **kwargs)
        if on["on"]:
            record.frames.extend(None if out is None else out.tolist() for out in outs)
        return outs

    local.runtime.reset_row = recorded_reset  # type: ignore[method-assign]
    local.step_rows = recorded_step  # type: ignore[method-assign]
    for frame, text in spans.items():
        engine.inject(text, "test", at_frame=frame)
    engine.start()
    for chunk in frames_of(pcm):
        assert engine.push_frame(chunk, timeout=60)
    engine.finish_input(timeout=60)
    assert engine.join(300)
    record.events = drain(engine.events)
    return record


@dataclass
class BatchedRecording:
    """Per row: the segments of what it was fed and returned, one per conversation."""

    rows: dict[int, list[Conversation]] = field(default_factory=dict)
    # Every transformer forward in order, with its input's shape [batch, 17, positions]:
    # ("step", rows that execute, shape) or ("row", row, shape)
    forwards: list[tuple[str, Any, tuple[int, ...]]] = field(default_factory=list)

    def segment(self, row: int) -> Conversation:
        return self.rows.setdefault(row, [Conversation()])[-1]


def record_batched(engine: LocalEngine) -> BatchedRecording:
    """Wrap the engine's transformer and generator; call before engine.start()."""
    lm = engine.checkpoint.lm
    rec = BatchedRecording()
    forward_text = lm.forward_text

    def recorded(sequence: torch.Tensor, *args):
        state = streaming_state(lm.transformer)
        assert state is not None
        n = sequence.shape[-1]
        reading = engine.runtime.row_reading()
        if not engine.ready.is_set():
            pass  # the warm-up, forgotten by the resets after it
        elif reading is None:  # the batched step: every row, exec_mask's advance
            rows = torch.nonzero(state.exec_mask).flatten().tolist()
            rec.forwards.append(("step", tuple(rows), tuple(sequence.shape)))
            for row in rows:
                seg = rec.segment(row)
                seg.fed.append(sequence[row, :, 0].tolist())
                seg.forwards.append((sequence.shape[0], n))
        else:  # one row's forward, on the shared batch-1 copy of the state
            assert sequence.shape[0] == 1 and state.batch_size == 1
            row = reading
            rec.forwards.append(("row", row, tuple(sequence.shape)))
            seg = rec.segment(row)
            seg.fed.extend(sequence[0, :, i].tolist() for i in range(n))
            seg.forwards.append((1, n))
        return forward_text(sequence, *args)

    lm.forward_text = recorded  # type: ignore[method-assign,assignment]
    reset_row, step = engine.runtime.reset_row, engine.step_rows

    def recorded_reset(row: int) -> None:
        reset_row(row)
        if engine.ready.is_set():  # a conversation joins the row
            rec.rows.setdefault(row, []).append(Conversation())

    def recorded_step(rows, *args, **kwargs):
        outs = step(rows, *args, **kwargs)
        if engine.ready.is_set():
            for row, out in zip(rows, outs, strict=True):
                rec.segment(row).frames.append(None if out is None else out.tolist())
        return outs

    engine.runtime.reset_row = recorded_reset  # type: ignore[method-assign]
    engine.step_rows = recorded_step  # type: ignore[method-assign]
    return rec


def conversation_of(rec: BatchedRecording, row: int, index: int) -> Conversation:
    """The index-th conversation that held `row`."""
    return rec.rows[row][index]


def audio(events: list[object]) -> np.ndarray:
    """The PCM of every AudioOut, [frames, 1920]."""
    frames = [e.pcm for e in events if isinstance(e, ev.AudioOut)]
    return np.stack(frames) if frames else np.zeros((0, FRAME_SAMPLES), np.float32)


def assert_same_audio(got: list[object], want: list[object], exact: bool) -> None:
    """Bit for bit (one Mimi stream per slot, or the same batch twice), else to float
    rounding (batched Mimi against a stream of its own)."""
    a, b = audio(got), audio(want)
    assert a.shape == b.shape
    if exact:
        assert a.tobytes() == b.tobytes()
    else:
        np.testing.assert_allclose(a, b, rtol=0, atol=PCM_TOLERANCE)
