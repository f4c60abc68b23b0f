"""Many conversations in one engine: B slots, ONE batched forward per frame.

One thread owns the LM's generator (streaming at batch B, one row per slot), Mimi and every
slot's span injector. Each tick it takes one frame from every slot that has one, runs each
of those slots' span work on its own row (a chunk or a block: a forward of that row alone,
row_view.py), encodes each frame with the slot's own Mimi stream, runs ONE batched step
for those rows (a slot without a frame this tick does not advance: exec_mask), decodes
each row and delivers each slot's events, the same events a DuplexEngine emits.

Continuous batching: a conversation joins or leaves at a frame boundary. Joining resets
its row (reset_mask) and prefills its conversation start (voice prompt, persona) for that
row alone; leaving frees the row. A slot's error (a voice that does not exist, a span
that fails) ends that slot only; a slot without frames (a slow client) is simply not in
the tick; neither stalls nor changes the others.

Engine-wide, not per slot: sampling (greedy or not) and the seed, since the rows share one
sampling call; the chunk limit is the engine's (a slot may ask for less), and without a
fixed one it is measured at warm-up with every slot talking, and so is the longest span.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from app.checkpoints.loader import LoadedCheckpoint
from app.engine.batched.batched_forcing import BatchedForcingGenerator
from app.engine.batched.batched_lm_gen import BatchedLMGen
from app.engine.batched.engine_slot import EngineSlot
from app.engine.batched.row_generator import RowGenerator
from app.engine.batched.slot_mimi import BatchedMimi, PerSlotMimi, SlotCodec
from app.engine.conversation_start import Placeholders, StartPlan, placeholder_codes, plan_start
from app.engine.device import synchronize
from app.engine.duplex_engine import EngineOptions
from app.engine.events import (
    AudioOut,
    BlockSlot,
    EngineError,
    EngineReady,
    EngineStopped,
    FirstAudioAfterSpan,
    FrameStats,
    RetToken,
    SpanInjected,
    TextPiece,
)
from app.engine.frame_budget import ChunkBudget, measure_chunk_budget
from app.engine.kv_ring import widen_attention_rings
from app.engine.shown_text import shown_text_id
from app.engine.span_block import block_columns
from app.engine.span_text import SpanTokenizer
from app.frame_worker import END_OF_INPUT
from app.frames import FRAME_MS, FRAME_SAMPLES

log = logging.getLogger(__name__)


@dataclass
class _Frame:
    slot: EngineSlot
    pcm: np.ndarray
    start: float = 0.0  # when its tick's work began
    inject_ms: float = 0.0
    span_events: tuple = ()
    failed: bool = False


class BatchedEngine:
    def __init__(self, checkpoint: LoadedCheckpoint, slots: int,
                 options: EngineOptions | None = None, gather_ms: float = 20.0,
                 batched_mimi: bool = True) -> None:
        """`options`: the engine-wide ones (greedy, seed, chunk_limit, budget_margin,
        warmup_frames). `gather_ms`: how long a tick waits, once one slot has a frame,
        for the other talking slots' frames to arrive, so they share the step.
        `batched_mimi`: Mimi in one batched call per tick (False: one stream per slot,
        bit for bit the single engine's PCM; slot_mimi.py)."""
        if slots < 1:
            raise ValueError("a batched engine needs at least one slot")
        self.checkpoint = checkpoint
        self.options = options or EngineOptions()
        self.slot_count = slots
        self.gather_s = gather_ms / 1000.0
        manifest = checkpoint.manifest
        sampling = manifest.sampling
        use_sampling = not self.options.greedy
        self.gen: RowGenerator
        if manifest.generator == "forcing":
            self.gen = BatchedForcingGenerator(
                checkpoint.lm, use_sampling, sampling.temp, sampling.temp_text, sampling.top_k,
                sampling.top_k_text)
        else:
            self.gen = BatchedLMGen(
                checkpoint.lm, use_sampling, sampling.temp, sampling.temp_text, sampling.top_k,
                sampling.top_k_text, cfg_coef=sampling.cfg_coef)
        self.context_window = int(checkpoint.lm.context or 0)
        retrieval = manifest.retrieval
        self.ret_id = retrieval.ret_id if retrieval.trigger == "ret_token" else None
        self.control_ids = manifest.control_ids
        self.blocks = manifest.span_placement.kind == "block"
        if self.blocks:  # a block is never split: the rings must hold the longest one
            self.max_chunk = self.new_span_tokenizer().max_tokens
        else:
            self.max_chunk = max(1, min(manifest.max_chunk_positions, self.options.chunk_limit
                                        or manifest.max_chunk_positions))
        self.placeholders: Placeholders | None = None
        self.codec: SlotCodec = (BatchedMimi if batched_mimi else PerSlotMimi)(checkpoint.mimi)
        self._rows: list[EngineSlot | None] = [None] * slots  # a slot holds its row
        self._lock = threading.Lock()
        self._joining: queue.SimpleQueue[EngineSlot] = queue.SimpleQueue()
        self._live: list[EngineSlot] = []
        self._held: dict[int, object] = {}  # row -> the item taken for the next tick
        self._talking: set[int] = set()  # rows that had a frame in the last tick
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.ready = threading.Event()  # warmed up: slots join from now on
        self.ticks = 0  # batched steps run (tests and benchmarks)
        # Measured at warm-up with every row talking (None with a fixed chunk limit).
        self.budget: ChunkBudget | None = None
        # The batched step's own time (the generator's step: no Mimi, no span), last minute.
        self.step_times_ms: deque[float] = deque(maxlen=750)

    # ---- any thread ---------------------------------------------------------------------

    def new_span_tokenizer(self) -> SpanTokenizer:
        manifest = self.checkpoint.manifest
        return SpanTokenizer(self.checkpoint.tokenizer, manifest.span_wrapping,
                             manifest.max_span_tokens, self.control_ids)

    def block_columns(self, ids: Sequence[int]) -> torch.Tensor:
        assert self.placeholders is not None
        return block_columns(ids, self.placeholders, self.checkpoint.lm.num_codebooks)

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("the batched engine runs once; make a new one to start again")
        self._thread = threading.Thread(target=self._run, name="batched-engine", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> bool:
        """Stop the engine: every slot ends ("stopped"). True when the thread has ended."""
        self._stop.set()
        self.wake()
        if self._thread is None:
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def free_slots(self) -> int:
        with self._lock:
            return sum(slot is None for slot in self._rows)

    def open_slot(self, options: EngineOptions | None = None,
                  events: queue.SimpleQueue | None = None) -> EngineSlot | None:
        """A slot for one conversation, or None when every slot is taken. Its row is held
        from now on; the conversation joins at the frame boundary after `slot.start()`."""
        options = options or EngineOptions()
        manifest = self.checkpoint.manifest
        if options.forced_ret_frames and (self.ret_id is None or manifest.generator != "forcing"):
            raise ValueError(f"{manifest.id} does not ask with <ret>: nothing to force")
        if self._stop.is_set() or (self._thread is not None and not self._thread.is_alive()):
            raise RuntimeError("the batched engine has stopped")
        with self._lock:
            row = next((r for r, slot in enumerate(self._rows) if slot is None), None)
            if row is None:
                return None
            slot = EngineSlot(self, row, options, events)
            self._rows[row] = slot
        return slot

    def request_join(self, slot: EngineSlot) -> None:
        self._joining.put(slot)
        self.wake()

    def request_leave(self, slot: EngineSlot) -> None:
        with self._lock:
            started = slot.running
        if not started:  # never started: nothing on the engine thread holds it
            self._free(slot, "stopped")
        self.wake()

    def wake(self) -> None:
        self._wake.set()

    # ---- the engine thread --------------------------------------------------------------

    def _run(self) -> None:
        try:
            with torch.no_grad():
                self._prepare_engine()
                with self.gen.streaming(self.slot_count), self.codec.streaming(self.slot_count):
                    widen_attention_rings(self.checkpoint.lm, self.max_chunk)
                    self._warm_up()
                    self.ready.set()
                    while not self._stop.is_set():
                        self._tick()
        except Exception as exc:  # the thread must never die silently
            log.exception("batched engine failed")
            for slot in self._all_slots():
                slot.emit(EngineError(f"{type(exc).__name__}: {exc}", fatal=True))
                self._free(slot, "error")
        finally:
            for slot in self._all_slots():
                self._free(slot, "stopped")

    def _all_slots(self) -> list[EngineSlot]:
        with self._lock:
            return [slot for slot in self._rows if slot is not None]

    def _prepare_engine(self) -> None:
        ck = self.checkpoint
        start = ck.manifest.conversation_start
        if self.blocks or start.kind == "persona_prompt":
            placement = ck.manifest.span_placement
            self.placeholders = placeholder_codes(
                ck.mimi, placement.agent_codes or start.agent_silence_codes,
                placement.user_codes or start.user_tone_codes)

    def _warm_up(self) -> None:
        """A few batched frames on every row (kernels, CUDA graphs), the frame budget
        measured with every row talking, then all rows reset."""
        rows = list(range(self.slot_count))
        for row in rows:  # each row's Mimi stream (a joining slot starts its own again)
            self.codec.join(row)
        for _ in range(self.options.warmup_frames):
            self._silent_frame(rows)
        self._measure_budget(rows)
        for row in rows:
            self.gen.reset_row(row)
        if self.options.seed is not None:
            torch.manual_seed(self.options.seed)

    def _silent_frame(self, rows: list[int]) -> None:
        """One tick's model work for every row, on silence: Mimi in, the step, Mimi out."""
        pcm = torch.zeros((len(rows), FRAME_SAMPLES))
        outs = self.gen.step(rows, self.codec.encode(rows, pcm), [None] * len(rows))
        speaking = [i for i, out in enumerate(outs) if out is not None]
        if speaking:
            count = self.checkpoint.mimi.num_codebooks
            codes = torch.stack([outs[i][1 : 1 + count] for i in speaking])  # type: ignore[index]
            self.codec.decode([rows[i] for i in speaking], codes)

    def _measure_budget(self, rows: list[int]) -> None:
        """Without a fixed chunk limit: what fits in a frame here with EVERY slot talking
        (the worst tick) plus one slot's span forward, as the single engine measures its
        own (frame_budget.py); each slot's chunk and span limits come from it at its join."""
        if self.options.chunk_limit is not None:
            return
        lm = self.checkpoint.lm
        pad = lm.text_padding_token_id
        self.budget = measure_chunk_budget(
            run_frame=lambda: self._silent_frame(rows),
            run_prefill=lambda k: self.gen.prefill_positions(rows[0], [pad] * k),
            sync=lambda: synchronize(lm.device),
            cap=self.max_chunk,
            margin=self.options.budget_margin,
            timing=self.options.budget_timing,
        )

    def _fit_to_budget(self, slot: EngineSlot) -> None:
        """The slot's limits from the budget measured at warm-up (a slot may ask for less)."""
        if self.budget is None:
            return
        fits = self.budget.chunk_limit
        slot.injector.chunk_limit = min(slot.injector.chunk_limit, fits)
        if self.blocks:
            slot.span_tokenizer.fit_to_budget(fits, self.max_chunk)

    def _free(self, slot: EngineSlot, reason: str) -> None:
        with self._lock:
            if self._rows[slot.row] is not slot:
                return  # already freed
            self._rows[slot.row] = None
        if slot in self._live:
            self._live.remove(slot)
        self._held.pop(slot.row, None)
        slot.emit(EngineStopped(slot.frame_index, reason))
        slot.ended()

    def _fail(self, slot: EngineSlot, exc: Exception) -> None:
        log.exception("slot %d failed", slot.row)
        slot.emit(EngineError(f"{type(exc).__name__}: {exc}", fatal=True))
        self._free(slot, "error")

    def _boundary(self) -> None:
        """Between two frames: slots that asked to leave leave; new ones join."""
        for slot in list(self._live):
            if slot.leaving:
                self._free(slot, "stopped")
        while True:
            try:
                slot = self._joining.get_nowait()
            except queue.Empty:
                break
            if slot.leaving:
                self._free(slot, "stopped")
                continue
            try:
                self._admit(slot)
            except Exception as exc:  # its start failed (a missing voice): it alone ends
                self._fail(slot, exc)

    def _plan(self, options: EngineOptions) -> StartPlan | None:
        ck = self.checkpoint
        if ck.manifest.conversation_start.kind != "persona_prompt":
            return None
        assert self.placeholders is not None
        return plan_start(ck.manifest, ck.folder, ck.mimi, ck.tokenizer, self.placeholders,
                          ck.lm.text_padding_token_id, self.control_ids, voice=options.voice,
                          persona=options.role, user_name=options.user_name,
                          user_city=options.user_city)

    def _admit(self, slot: EngineSlot) -> None:
        """The slot's row starts its conversation: reset, Mimi stream, start prefilled."""
        with self.codec.unstreamed():  # a voice prompt is encoded in one pass
            plan = self._plan(slot.options)
        row = slot.row
        self._fit_to_budget(slot)
        self.gen.reset_row(row)
        self.codec.join(row)
        prompt_frames = 0
        if plan is not None:
            positions = 0
            if plan.saved_voice is not None:
                positions += self.gen.replay_embeddings(row, plan.saved_voice.embeddings,
                                                        plan.saved_voice.ring)
            columns = self.max_chunk if slot.options.batched_prefix else 1
            positions += self.gen.prefill_forced(row, plan.steps, max_columns=columns)
            slot.ledger.add_frames(positions)
            prompt_frames = len(plan.steps) + (plan.voice_frames if plan.saved_voice else 0)
        self._live.append(slot)
        self._talking.add(row)
        slot.ready.set()
        ck = self.checkpoint
        slot.emit(EngineReady(
            model_id=ck.manifest.id, device=str(ck.device),
            dtype=str(ck.dtype).removeprefix("torch."), chunk_limit=slot.injector.chunk_limit,
            step_ms=None if self.budget is None else self.budget.step_ms,
            budget_ms=FRAME_MS * (1.0 - self.options.budget_margin),
            context_window=self.context_window, prompt_frames=prompt_frames,
            span_tokens=slot.span_tokenizer.content_budget))

    def _gather(self) -> list[tuple[EngineSlot, object]]:
        """One item from every live slot that has one; once one has, wait up to gather_s
        for the others."""
        deadline: float | None = None
        while True:
            self._wake.clear()
            for slot in self._live:
                if slot.row not in self._held:
                    item = slot.next_item()
                    if item is not None:
                        self._held[slot.row] = item
            # Waited for: the slots that talked last tick. A silent one (a slow client) is
            # not waited for: it costs the others nothing.
            missing = [s for s in self._live if s.row not in self._held
                       and s.row in self._talking and not s.leaving]
            if self._held and deadline is None:
                deadline = time.monotonic() + self.gather_s
            if self._stop.is_set() or (self._held and (
                    not missing or time.monotonic() >= (deadline or 0.0))):
                break
            if not self._held:
                self._wake.wait(0.05)
                if not self._joining.empty() or any(s.leaving for s in self._live):
                    break
                continue
            self._wake.wait(max(0.0, (deadline or 0.0) - time.monotonic()))
        taken = [(slot, self._held.pop(slot.row)) for slot in list(self._live)
                 if slot.row in self._held]
        self._talking = {slot.row for slot, _item in taken}
        return taken

    def _tick(self) -> None:
        self._boundary()
        if not self._live:
            self._wake.wait(0.05)
            self._wake.clear()
            return
        frames: list[_Frame] = []
        for slot, item in self._gather():
            if item is END_OF_INPUT:
                self._free(slot, "end of input")
            else:
                frames.append(_Frame(slot, item))  # type: ignore[arg-type]
        if frames:
            self._step(frames)

    def _step(self, frames: list[_Frame]) -> None:
        ck = self.checkpoint
        start = time.perf_counter()
        for frame in frames:  # each slot's span work, on its row alone
            slot = frame.slot
            frame.start = start
            try:
                t0 = time.perf_counter()
                frame.span_events = tuple(slot.injector.before_frame(slot.frame_index))
                frame.inject_ms = (time.perf_counter() - t0) * 1000.0
            except Exception as exc:
                frame.failed = True
                self._fail(slot, exc)
        frames = [f for f in frames if not f.failed]
        if not frames:
            return
        rows = [f.slot.row for f in frames]
        encode_start = time.perf_counter()
        pcm = torch.from_numpy(np.stack([f.pcm for f in frames]))  # [A, 1920]
        user = self.codec.encode(rows, pcm)  # [A, 8]
        text = [self.ret_id if f.slot.frame_index in f.slot.options.forced_ret_frames
                else None for f in frames]
        step_start = time.perf_counter()
        outs = self.gen.step(rows, user, text)  # ONE batched step
        step_ms = (time.perf_counter() - step_start) * 1000.0
        self.ticks += 1
        self.step_times_ms.append(step_ms)
        speaking = [i for i, out in enumerate(outs) if out is not None]
        decoded: dict[int, np.ndarray] = {}
        if speaking:
            codes = torch.stack([outs[i][1 : 1 + ck.mimi.num_codebooks]  # type: ignore[index]
                                 for i in speaking])  # [S, 8]
            pcm_out = self.codec.decode([rows[i] for i in speaking], codes)  # [S, 1920]
            decoded = dict(zip(speaking, pcm_out.float().cpu().numpy(), strict=True))
        # What each participant waited for besides its own span: Mimi and the step.
        model_ms = (time.perf_counter() - encode_start) * 1000.0
        silence = np.zeros(FRAME_SAMPLES, dtype=np.float32)
        for i, (frame, out) in enumerate(zip(frames, outs, strict=True)):
            try:
                text_id = None if out is None else int(out[0])
                self._deliver(frame, text_id, decoded.get(i, silence), model_ms)
            except Exception as exc:
                self._fail(frame.slot, exc)

    def _shown_text(self, row: int, text_id: int | None) -> int | None:
        restored = self.gen.restored_text(row)
        if restored is not None:
            text_id = restored
        return shown_text_id(text_id, self.checkpoint.tokenizer, self.control_ids)

    def _deliver(self, frame: _Frame, text_id: int | None, pcm: np.ndarray,
                 model_ms: float) -> None:
        """Emit the slot's events for its frame, as DuplexEngine's loop does."""
        ck = self.checkpoint
        slot = frame.slot
        index = slot.frame_index
        for event in frame.span_events:
            slot.emit(event)
            if isinstance(event, SpanInjected):
                slot.counters.span_landed()
        block = slot.injector.last_block
        if block is not None:
            span_id, positions, prefill_ms = block
            total = prefill_ms + model_ms
            slot.emit(BlockSlot(span_id, index, positions, prefill_ms, model_ms, total,
                                total > FRAME_MS))
        slot.ledger.add_frames(1)
        if text_id is not None and text_id == self.ret_id:
            slot.emit(RetToken(index))
        shown = self._shown_text(slot.row, text_id)
        if shown is not None:
            piece = ck.tokenizer.id_to_piece(shown).replace("▁", " ")
            slot.emit(TextPiece(index, piece, shown))
        audio = AudioOut(index, pcm)
        slot.emit(audio)
        for event in frame.span_events:
            if isinstance(event, SpanInjected):
                slot.emit(FirstAudioAfterSpan(event.span_id, index, audio.monotonic_s))
        frame_ms = (time.perf_counter() - frame.start) * 1000.0
        slot.emit(FrameStats(index, frame_ms, frame.inject_ms, slot.ledger.usage()))
        slot.counters.frame(frame_ms)
        slot.frame_index += 1
