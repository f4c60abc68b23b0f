"""`bench gpu --slots 1,8,16,...`: many conversations on one engine, every one talking.

For each slot count N: an engine of N rows on the model, N conversations opened and
started, then frames fed in lock-step (frame f to every slot, then wait for every slot's
frame f out), with one span landing every `span_every` frames in the next slot in turn.
Reported per N: the frame time (from handing frame f to all N slots to the last of their
N frames out: what every conversation waited) p50/p99/max, the engine's own tick time per
slot (FrameStats), the frames that carried a span and their time, late frames, device
memory per slot split into its KV ring, its codec state and the rest, the CUDA graphs the
engine holds, whether N holds the frame (p99 < 80 ms), and beside it stock moshi's
`LMGen.step` at batch N on the same weights (stock_anchor.py) with our frame's ratio to it.
Lock-step frames come as fast as the engine takes them, so a count that holds is real time
with room to spare, and one that does not says by how much it falls behind. A count whose
engine fails (out of memory) is an error row with the reason, at once, and the next count
runs; each row is handed to `progress` the moment it is measured.

The random 7B (bench gpu's default) has no tokenizer on the lent machine: a stand-in
SentencePiece model (trained here, a few hundred pieces) spells the spans, and text ids
the model emits beyond its pieces read as unknown (not shown). Speed does not depend on it.
Its conversations start empty (no voice prompt or persona on disk: the start is prefilled
for its row alone and costs only at joining, not per frame).
"""

from __future__ import annotations

import gc
import queue
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import numpy as np
import sentencepiece
import torch
from moshi.models import LMModel, MimiModel

from app.asr.stt_catalog import LoadedStt
from app.bench.stock_anchor import INCLUDES as STOCK_INCLUDES
from app.bench.stock_anchor import stock_step_ms
from app.checkpoints.catalog import ConversationStart, get_manifest
from app.checkpoints.loader import LoadedCheckpoint
from app.engine.device import synchronize
from app.engine.events import AudioOut, BlockSlot, EngineError, FrameStats, SpanInjected
from app.engine.local_engine import LocalEngine
from app.engine.row_conversation import RowConversation
from app.engine.speech_engine import EngineOptions
from app.frames import FRAME_MS, FRAME_SAMPLES, SAMPLE_RATE
from app.moshi_internals import kv_rings, streaming_state_bytes
from app.row_host import HostFailedError

READY_TIMEOUT_S = 600.0
FRAME_TIMEOUT_S = 120.0
SPAN_SENTENCE = ("the quick brown fox jumps over the lazy dog while the river runs past "
                 "the old mill and the bells ring across the valley")

INCLUDES = {
    "frame_ms": "lock-step: from handing frame f to every slot to the last slot's frame f "
                "out (the span work, every slot's Mimi encode, ONE batched step, every "
                "slot's decode and the hand-offs), p50/p99/max over the measured frames",
    "tick_ms": "the engine's own FrameStats of each slot (its batched tick), over every "
               "slot's frames",
    "span_frame_ms": "the frames that carried a span (its row's forward + the tick), max",
    "memory_per_slot_gb": "CUDA only: memory allocated once the N conversations have joined "
                          "minus before the engine was made, over N (KV rings, the batch's "
                          "state, graph pools); null on a CPU",
    "kv_per_slot_gb": "one row's share of the temporal transformer's KV rings (counted from "
                      "the tensors, widened for the longest read)",
    "codec_per_slot_gb": "one row's share of Mimi's streaming state (counted)",
    "rest_per_slot_gb": "CUDA only: memory_per_slot_gb minus the KV and codec shares (the "
                        "batch's activations, the graphs' pools and the shared read copy, "
                        "spread over N)",
    "graphs": "the CUDA graphs the engine holds (captured on CUDA, counted elsewhere): the "
              "step's and one per padded read size, the same at any N",
    "stock_step_ms": STOCK_INCLUDES,
    "frame_over_stock": "frame_ms_p50 / stock_step_ms p50: what our frame (Mimi, bookkeeping, "
                        "spans, hand-offs) costs over the plain batched step",
    "asr": "with --asr: a recogniser of N rows on the same device, fed noise in lock-step "
           "(frame_ms: one lock-step frame of all N rows; its state and weights in bytes)",
    "holds_frame": f"frame_ms p99 < {FRAME_MS:g} ms",
    "drain_frames": "unmeasured frames after the measured ones, until every span sent had "
                    "landed (a span of positions goes in chunks of what fits a frame now)",
    "span_positions": "the positions one span takes, its wrapping included",
    "frames_per_s": "N conversations' frames a second, lock-step: N * 1000 / frame_ms p50",
}


class StandInTokenizer(sentencepiece.SentencePieceProcessor):
    """A small SentencePiece model standing in for a checkpoint's own (random weights):
    ids past its pieces are unknown, never an error."""

    def _outside(self, token_id: int) -> bool:
        return not 0 <= token_id < self.get_piece_size()

    def is_control(self, token_id: int) -> bool:  # type: ignore[override]  # ids only
        return not self._outside(token_id) and bool(super().is_control(token_id))

    def is_byte(self, token_id: int) -> bool:  # type: ignore[override]  # ids only
        return not self._outside(token_id) and bool(super().is_byte(token_id))

    def is_unused(self, token_id: int) -> bool:  # type: ignore[override]  # ids only
        return not self._outside(token_id) and bool(super().is_unused(token_id))

    def is_unknown(self, token_id: int) -> bool:  # type: ignore[override]  # ids only
        return self._outside(token_id) or bool(super().is_unknown(token_id))


def stand_in_tokenizer(vocab_size: int = 400, seed: int = 0) -> StandInTokenizer:
    from app.checkpoints.tiny_builder import train_tokenizer_in_child

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "spm.model"
        # byte pieces: the release's span ids 12 and 13 are bytes, as in its tokenizer
        train_tokenizer_in_child(path, vocab_size, seed, byte_fallback=True)
        return StandInTokenizer(model_file=str(path))


def random_checkpoint(lm: LMModel, mimi: MimiModel, release_id: str,
                      tokenizer: sentencepiece.SentencePieceProcessor) -> LoadedCheckpoint:
    """The random-weight model as a loaded checkpoint of `release_id` (its ids, placeholder
    codes and generator), starting its conversations empty."""
    manifest = replace(get_manifest(release_id), conversation_start=ConversationStart())
    return LoadedCheckpoint(manifest, Path("."), cast(Any, None), mimi, lm, tokenizer,
                            lm.device, next(lm.parameters()).dtype)


def span_text(checkpoint: LoadedCheckpoint, tokens: int) -> str:
    """Text of about `tokens` tokens in the checkpoint's tokenizer (the span tokenizer cuts
    it at the engine's limit)."""
    words = SPAN_SENTENCE.split()
    text, i = "", 0
    while len(checkpoint.tokenizer.encode(text)) < tokens and i < 8 * tokens:
        text = f"{text} {words[i % len(words)]}".strip()
        i += 1
    return text


def _tone(index: int) -> np.ndarray:
    t = (np.arange(FRAME_SAMPLES) + index * FRAME_SAMPLES) / SAMPLE_RATE
    return (0.1 * np.sin(2 * np.pi * 220 * t)).astype(np.float32)


def _percentile(values: list[float], q: float) -> float | None:
    return round(float(np.percentile(values, q)), 3) if values else None


class _SlotLog:
    """What one slot's events said, drained by the bench thread."""

    def __init__(self, slot: RowConversation) -> None:
        self.slot = slot
        self.frames_out = 0
        self.tick_ms: list[float] = []
        self.spans = 0
        self.block_total_ms: list[float] = []
        self.errors: list[str] = []

    def wait_frame(self, index: int, deadline: float) -> None:
        while self.frames_out <= index:
            timeout = deadline - time.monotonic()
            if timeout <= 0:
                raise TimeoutError(f"slot {self.slot.row}: no frame {index} out")
            try:
                event = self.slot.events.get(timeout=timeout)
            except queue.Empty:
                continue
            if isinstance(event, AudioOut):
                self.frames_out = event.frame_index + 1
            elif isinstance(event, FrameStats):
                self.tick_ms.append(event.frame_ms)
            elif isinstance(event, SpanInjected):
                self.spans += 1
            elif isinstance(event, BlockSlot):
                self.block_total_ms.append(event.total_ms)
            elif isinstance(event, EngineError):
                self.errors.append(event.message)
                raise RuntimeError(f"slot {self.slot.row}: {event.message}")


def span_positions(slot: RowConversation, text: str) -> int:
    """The positions a span of `text` takes in `slot` (its wrapping included)."""
    tokenizer = slot.span_tokenizer
    return len(tokenizer.cut(text, tuple(tokenizer.content(text))).ids)


def drain_bound(spans_sent: int, count: int, positions: int) -> int:
    """Unmeasured frames within which every span sent lands, on any machine: a frame with a
    span pending injects at least one position of it (the chunk limit never goes under 1,
    however busy the device), and a slot's spans go in one after the other."""
    return -(-spans_sent // count) * positions


def _gb(n_bytes: float) -> float:
    return round(n_bytes / 2**30, 4)


def _wait_joined(engine: LocalEngine, slot: RowConversation) -> None:
    """The slot's start is in; HostFailedError at once (with why) if the engine failed."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not slot.ready.wait(0.2):
        engine.check_running()
        if time.monotonic() > deadline:
            raise RuntimeError(f"slot {slot.row} did not join in {READY_TIMEOUT_S:g} s")


def _memory(device: torch.device) -> int | None:
    if device.type != "cuda":
        return None
    synchronize(device)
    return int(torch.cuda.memory_allocated(device))


def run_slot_count(checkpoint: LoadedCheckpoint, count: int, frames: int, span_every: int,
                   text: str, warm_frames: int = 3, seed: int = 0,
                   chunk_limit: int | None = None) -> dict[str, Any]:
    """One slot count: N conversations talking in lock-step, a span every `span_every`.
    `chunk_limit`: the most positions of a span a frame takes (None: what fits the frame
    budget here, following the load)."""
    device = checkpoint.device
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    before = _memory(device)
    options = EngineOptions(seed=seed, greedy=True, chunk_limit=chunk_limit)
    engine = LocalEngine(checkpoint, count, options)
    started = time.perf_counter()
    engine.start()
    slots: list[RowConversation] = []
    try:
        engine.wait_ready(READY_TIMEOUT_S)  # a failure ends this at once, with its reason
        warm_s = time.perf_counter() - started
        for _ in range(count):
            slot = engine.open(options)
            assert slot is not None, "a fresh engine has a slot for each conversation"
            slot.start()
            slots.append(slot)
        for slot in slots:
            _wait_joined(engine, slot)
        joined_s = time.perf_counter() - started
        after = _memory(device)
        kv_row = sum(ring.cache.numel() * ring.cache.element_size()
                     for ring in kv_rings(checkpoint.lm)) / count
        codec_row = streaming_state_bytes(checkpoint.mimi) / count
        graphs = engine.graph_count()
        logs = [_SlotLog(slot) for slot in slots]
        walls: list[float] = []
        span_walls: list[float] = []
        spans_sent = 0
        for index in range(warm_frames + frames):
            measured = index >= warm_frames
            span_now = measured and (index - warm_frames) % span_every == 0
            if span_now:
                slots[spans_sent % count].inject(text, "bench")
                spans_sent += 1
            pcm = _tone(index)
            start = time.perf_counter()
            for slot in slots:
                if not slot.push_frame(pcm, timeout=FRAME_TIMEOUT_S):
                    raise RuntimeError(f"slot {slot.row} took no frame {index}")
            deadline = time.monotonic() + FRAME_TIMEOUT_S
            for log in logs:
                log.wait_frame(index, deadline)
            wall = (time.perf_counter() - start) * 1000.0
            if measured:
                walls.append(wall)
                if span_now:
                    span_walls.append(wall)
        # Unmeasured frames until every span sent has landed: a span of positions goes in
        # chunks of what fits a frame now (the chunk limit follows the load), so on a busy
        # machine its last chunks land after the measured frames, at one position a frame
        # at worst: the bound is in frames, never in the machine's time.
        extra = 0
        positions = span_positions(slots[0], text)
        bound = drain_bound(spans_sent, count, positions)
        while sum(log.spans for log in logs) < spans_sent and extra < bound:
            index = warm_frames + frames + extra
            for slot in slots:
                if not slot.push_frame(_tone(index), timeout=FRAME_TIMEOUT_S):
                    raise RuntimeError(f"slot {slot.row} took no frame {index}")
            deadline = time.monotonic() + FRAME_TIMEOUT_S
            for log in logs:
                log.wait_frame(index, deadline)
            extra += 1
        ticks = [ms for log in logs for ms in log.tick_ms[warm_frames : warm_frames + frames]]
        p99 = _percentile(walls, 99)
        return {
            "slots": count,
            "frames": frames,
            "frame_ms_p50": _percentile(walls, 50),
            "frame_ms_p99": p99,
            "frame_ms_max": round(max(walls), 3) if walls else None,
            "tick_ms_p50": _percentile(ticks, 50),
            "tick_ms_p99": _percentile(ticks, 99),
            "late_frames": sum(ms > FRAME_MS for ms in walls),
            "spans_sent": spans_sent,
            "spans_landed": sum(log.spans for log in logs),
            "span_positions": positions,
            "drain_frames": extra,
            "span_frame_ms_max": round(max(span_walls), 3) if span_walls else None,
            "block_plus_tick_ms_max": round(max(ms for log in logs
                                                for ms in log.block_total_ms), 3)
            if any(log.block_total_ms for log in logs) else None,
            "memory_per_slot_gb": _gb((after - before) / count)
            if after is not None and before is not None else None,
            "kv_per_slot_gb": _gb(kv_row),
            "codec_per_slot_gb": _gb(codec_row),
            "rest_per_slot_gb": _gb((after - before) / count - kv_row - codec_row)
            if after is not None and before is not None else None,
            "graphs": {"step": graphs.step, "reads": graphs.reads,
                       "read_copy_gb": _gb(graphs.scratch_bytes)},
            "holds_frame": p99 is not None and p99 < FRAME_MS,
            "warm_up_s": round(warm_s, 3),
            "join_s": round(joined_s, 3),
            "batched_steps": engine.ticks,
            # N conversations' frames per second of wall time, lock-step (as fast as taken)
            "frames_per_s": round(count * 1000.0 / float(np.median(walls)), 2) if walls
            else None,
        }
    finally:
        for slot in slots:
            slot.stop(30.0)
        engine.stop(30.0)


def _recognition(stt: LoadedStt, count: int, frames: int = 20) -> dict[str, Any]:
    """A recogniser of `count` rows on `stt`, lock-step, as `bench asr` measures it."""
    from app.bench.asr_rows_bench import measure_recogniser

    gc.collect()
    try:
        result = measure_recogniser(stt, count, frames)
    except (RuntimeError, AssertionError) as exc:  # out of memory: said, not fatal
        return {"rows": count, "error": f"{type(exc).__name__}: {exc}"[:300]}
    return {key: result[key] for key in ("rows", "frame_ms", "frames_per_s", "state_bytes",
                                         "weights_bytes")}


def _stock(checkpoint: LoadedCheckpoint, count: int, seed: int) -> dict[str, Any]:
    gc.collect()
    try:
        return stock_step_ms(checkpoint.lm, count, seed=seed)
    except (RuntimeError, AssertionError) as exc:  # out of memory: said, not fatal
        return {"batch": count, "error": f"{type(exc).__name__}: {exc}"[:300]}


def run_slots_bench(checkpoint: LoadedCheckpoint, counts: tuple[int, ...], frames: int = 40,
                    span_every: int = 12, span_tokens: int = 64, seed: int = 0,
                    progress: Callable[[dict[str, Any]], None] | None = None,
                    stock: bool = True, stop_at_first_miss: bool = False,
                    asr: LoadedStt | None = None) -> dict[str, Any]:
    """Every slot count in turn; a count that fails (out of memory) is said with its
    reason and the rest still run (`stop_at_first_miss`: none after the first count that
    fails or misses the frame). `progress`: called with each count's row the moment it is
    measured, and with its stock anchor (a run cut short keeps what it had). `stock`:
    beside each count that ran, stock moshi's LMGen.step at that batch. `asr`: beside
    it too, a recogniser of that many rows on this STT (`serve --slots N --asr` runs both
    on the same device)."""
    if not counts or min(counts) < 1:
        raise ValueError("--slots takes counts of 1 or more, e.g. 1,8,16")
    if frames < 1 or span_every < 1:
        raise ValueError("the slot bench needs at least one frame and a span period of 1+")
    text = span_text(checkpoint, span_tokens)
    rows: list[dict[str, Any]] = []
    for count in counts:
        try:
            row = run_slot_count(checkpoint, count, frames, span_every, text, seed=seed)
        except (RuntimeError, TimeoutError) as exc:  # torch's OutOfMemoryError is one too
            reason = str(exc) if isinstance(exc, HostFailedError) else \
                f"{type(exc).__name__}: {exc}"
            row = {"slots": count, "error": reason[:500], "holds_frame": False}
        rows.append(row)
        if progress is not None:
            progress(row)
        if "error" in row:
            if stop_at_first_miss:
                break
            continue
        if stock:
            row["stock"] = _stock(checkpoint, count, seed)
            ours = row["frame_ms_p50"]
            stock_ms = row["stock"].get("step_ms_p50")
            row["frame_over_stock"] = round(ours / stock_ms, 2) if stock_ms else None
            if progress is not None:
                progress({"slots": count, "stock": row["stock"],
                          "frame_over_stock": row["frame_over_stock"]})
        if asr is not None:
            row["asr"] = _recognition(asr, count)
            if progress is not None:
                progress({"slots": count, "asr": row["asr"]})
        if stop_at_first_miss and not row["holds_frame"]:
            break
    holding = [row["slots"] for row in rows if row["holds_frame"]]
    return {
        "counts": list(counts),
        "span_every_frames": span_every,
        "span_tokens": len(checkpoint.tokenizer.encode(text)),
        "rows": rows,
        "largest_holding_frame": max(holding) if holding else 0,
        "median_frame_ms": statistics.median(
            [row["frame_ms_p50"] for row in rows if row.get("frame_ms_p50") is not None]
            or [0.0]),
        "includes": INCLUDES,
    }


def describe_slots(result: dict[str, Any]) -> list[str]:
    """The readable table of `bench gpu --slots` (lines)."""
    lines = [f"  slots: every slot talking, a span of ~{result['span_tokens']} tokens every "
             f"{result['span_every_frames']} frames somewhere",
             f"  {'N':>4} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'late':>5} "
             f"{'spans':>6} {'GiB/slot':>9} {'holds':>6}"]
    for row in result["rows"]:
        if "error" in row:
            lines.append(f"  {row['slots']:>4} {row['error']}")
            continue
        memory = row["memory_per_slot_gb"]
        lines.append(
            f"  {row['slots']:>4} {row['frame_ms_p50']:>8.2f} {row['frame_ms_p99']:>8.2f} "
            f"{row['frame_ms_max']:>8.2f} {row['late_frames']:>5} {row['spans_landed']:>6} "
            f"{'-' if memory is None else format(memory, '.3f'):>9} "
            f"{str(row['holds_frame']):>6}")
    lines.append(f"  largest N holding the frame (p99 < {FRAME_MS:g} ms): "
                 f"{result['largest_holding_frame']}")
    return lines
