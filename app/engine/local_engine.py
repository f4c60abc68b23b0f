"""The speech engine on this machine: ONE frame loop, for one conversation or many.

One thread owns the LM runtime, Mimi and every conversation's span injector. The engine
has B rows (the desktop and `run`: 1; `serve --slots N`: N; `serve`: 1, shared by the
conversations that come one after another). Each tick it takes one frame from every
conversation that has one, runs each of those conversations' span work on its own row (a
chunk of positions or a block: one forward of that row alone), encodes the frames with each
row's Mimi stream, runs ONE step for those rows (a row without a frame this tick does not
advance), decodes each row and delivers each conversation's events. With one row this is
the single-conversation loop exactly: the same forwards in the same order.

The column bookkeeping is the checkpoint's generator's (columns.py), kept per row on the
host; the framework (torch or MLX) is behind the seam of lm_runtime.py.

Continuous batching: a conversation joins or leaves at a frame boundary. Joining resets its
row and prefills its conversation start (voice prompt, persona) for that row alone; leaving
frees the row. A conversation owns its row from `open` to its end (row_conversation.py):
one that is stopped, or dropped before it started, gives its row back at once. A
conversation's error (a voice that does not exist, a span that fails) ends that one only;
a conversation without frames (a slow client) is simply not in the tick.

Engine-wide, not per conversation: sampling (greedy or not) and the seed, since the rows
share one sampling call (a one-row engine seeds each conversation after its start); the
frame budget, measured at warm-up with every row talking, from which each conversation's
chunk and span limits come when it joins, then follow the load (AdaptiveChunkLimit).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from app.checkpoints.loader import LoadedCheckpoint
from app.engine.columns import ZERO_TOKEN, ForcedStep, make_book
from app.engine.conversation_start import Placeholders, StartPlan, placeholder_codes, plan_start
from app.engine.events import (
    AudioOut,
    BlockSlot,
    EngineError,
    EngineEvent,
    EngineReady,
    EngineStopped,
    FirstAudioAfterSpan,
    FrameStats,
    RetToken,
    SpanInjected,
    TextPiece,
)
from app.engine.frame_budget import ChunkBudget, measure_chunk_budget
from app.engine.frameworks import framework_for
from app.engine.position_forwards import warmup_sizes
from app.engine.row_conversation import RowConversation
from app.engine.shown_text import shown_text_id
from app.engine.span_block import block_columns
from app.engine.span_text import SpanTokenizer
from app.engine.speech_engine import EngineOptions
from app.frame_gather import FrameGather
from app.frame_worker import END_OF_INPUT
from app.frames import FRAME_MS, FRAME_SAMPLES
from app.thread_owner import ThreadOwner

log = logging.getLogger(__name__)


@dataclass
class _Frame:
    conversation: RowConversation
    pcm: npt.NDArray[np.float32]
    span_events: list[EngineEvent] = field(default_factory=list)
    inject_ms: float = 0.0
    failed: bool = False


class EngineStartError(RuntimeError):
    """The engine cannot take a conversation (it stopped, or failed to warm up)."""


class LocalEngine(ThreadOwner):
    def __init__(self, checkpoint: LoadedCheckpoint, rows: int = 1,
                 options: EngineOptions | None = None, gather_ms: float = 20.0,
                 batched_mimi: bool = True) -> None:
        """`options`: the engine-wide ones (greedy, seed, chunk_limit, budget_margin,
        warmup_frames; the MLX engine's Mimi). `gather_ms`: how long a tick waits, once one
        row has a frame, for the other talking rows' frames, so they share the step.
        `batched_mimi` (several rows): Mimi in one batched call per tick (False: one stream
        per row, bit for bit the one-row engine's PCM; app/mimi_codec.py)."""
        if rows < 1:
            raise ValueError("an engine needs at least one row")
        super().__init__("speech-engine")
        self.checkpoint = checkpoint
        self.options = options or EngineOptions()
        self.row_count = rows
        self.gather_s = gather_ms / 1000.0
        manifest = checkpoint.manifest
        framework = framework_for(checkpoint, self.options, rows, batched_mimi)
        self.runtime, self.codec = framework.runtime, framework.codec
        self.dtype_label = framework.dtype_label
        self.book = make_book(manifest.generator, self.runtime.layout, rows)
        self.context_window = self.runtime.context
        retrieval = manifest.retrieval
        self.ret_id = retrieval.ret_id if retrieval.trigger == "ret_token" else None
        self.control_ids = manifest.control_ids
        self.blocks = manifest.span_placement.kind == "block"
        if self.blocks and manifest.generator != "forcing":
            raise ValueError(f"{manifest.id}: span blocks need the forcing generator")
        self.max_span_tokens = manifest.max_span_tokens
        if self.blocks:  # a block is never split: the rings must hold the longest one
            self.max_chunk = self.new_span_tokenizer().max_tokens
        else:
            self.max_chunk = max(1, min(manifest.max_chunk_positions, self.options.chunk_limit
                                        or manifest.max_chunk_positions))
        self.placeholders: Placeholders | None = None
        self._rows: list[RowConversation | None] = [None] * rows  # a conversation holds its row
        self._lock = threading.Lock()
        self._joining: queue.SimpleQueue[RowConversation] = queue.SimpleQueue()
        self._live: list[RowConversation] = []
        self._wake_up = threading.Event()  # a frame, a join or a leave to look at
        self._gather = FrameGather(self._wake_up, self.gather_s)
        self.ready = threading.Event()  # warmed up: conversations join from now on
        self.ticks = 0  # steps run for conversations (tests and benchmarks)
        # Measured at warm-up with every row talking (None with a fixed chunk limit).
        self.budget: ChunkBudget | None = None
        # The step's own time (book, LM, depformer: no Mimi, no span), the last minute.
        self.step_times_ms: deque[float] = deque(maxlen=750)

    # ---- any thread ---------------------------------------------------------------------

    def new_span_tokenizer(self) -> SpanTokenizer:
        manifest = self.checkpoint.manifest
        return SpanTokenizer(self.checkpoint.tokenizer, manifest.span_wrapping,
                             manifest.max_span_tokens, self.control_ids)

    def _wake(self) -> None:  # stopping: every conversation ends ("stopped")
        self.wake()

    @property
    def stopped(self) -> bool:
        return self._stop.is_set() or (self._thread is not None and not self._thread.is_alive())

    @property
    def free_rows(self) -> int:
        """Rows no conversation holds: what a server can still take."""
        with self._lock:
            return sum(holder is None for holder in self._rows)

    def conversations(self) -> list[RowConversation | None]:
        """Each row's conversation (None: free), in row order."""
        with self._lock:
            return list(self._rows)

    def open(self, options: EngineOptions | None = None,
             events: queue.SimpleQueue[Any] | None = None, owns_engine: bool = False
             ) -> RowConversation | None:
        """A conversation on a free row, or None when every row is held. Its row is held
        from now on, until the conversation ends (or is stopped before it starts); it joins
        at the frame boundary after its `start()`. `owns_engine`: the engine is this
        conversation's alone (started by its start, stopped with it)."""
        options = options or EngineOptions()
        manifest = self.checkpoint.manifest
        if options.forced_ret_frames and (self.ret_id is None or manifest.generator != "forcing"):
            raise ValueError(f"{manifest.id} does not ask with <ret>: nothing to force")
        if self._stop.is_set() or (self._thread is not None and not self._thread.is_alive()):
            raise EngineStartError("the speech engine has stopped")
        with self._lock:
            row = next((r for r, holder in enumerate(self._rows) if holder is None), None)
            if row is None:
                return None
            conversation = RowConversation(self, row, options, events, owns_engine)
            self._rows[row] = conversation
        return conversation

    def request_join(self, conversation: RowConversation) -> None:
        self._joining.put(conversation)
        self.wake()

    def request_leave(self, conversation: RowConversation) -> None:
        if not conversation.started:  # never started: nothing on the engine thread holds it
            self._free(conversation, "stopped")
        self.wake()

    def wake(self) -> None:
        """A frame came, or a conversation wants to join or leave: look now."""
        self._wake_up.set()

    # ---- the engine thread --------------------------------------------------------------

    def _run(self) -> None:
        try:
            self.prepare_placeholders()  # Mimi encodes them before it streams
            with self.runtime.streaming(self.row_count, self.max_chunk), \
                    self.codec.streaming(self.row_count):
                self._warm_up()
                self.ready.set()
                while not self._stop.is_set():
                    self._tick()
        except Exception as exc:  # the thread must never die silently
            log.exception("the speech engine failed")
            for conversation in self._held_rows():
                conversation.emit(EngineError(f"{type(exc).__name__}: {exc}", fatal=True))
                self._free(conversation, "error")
        finally:
            self._stop.set()
            for conversation in self._held_rows():
                self._free(conversation, "stopped")

    def _held_rows(self) -> list[RowConversation]:
        with self._lock:
            return [holder for holder in self._rows if holder is not None]

    def prepare_placeholders(self) -> None:
        """The codes a span block and a forced start carry where nobody speaks."""
        ck = self.checkpoint
        start = ck.manifest.conversation_start
        if self.blocks or start.kind == "persona_prompt":
            placement = ck.manifest.span_placement
            self.placeholders = placeholder_codes(
                ck.mimi, placement.agent_codes or start.agent_silence_codes,
                placement.user_codes or start.user_tone_codes)

    def _warm_up(self) -> None:
        """A few frames on every row (kernels, CUDA graphs), a read of every padded size
        (a graph is captured on a size's second use), the frame budget measured with every
        row talking, then every row reset."""
        seed = self.options.seed
        if seed is not None:
            self.runtime.seed(seed)
        rows = list(range(self.row_count))
        for row in rows:
            self.codec.join(row)
        for _ in range(self.options.warmup_frames):
            self._silent_frame(rows)
        pad = self.runtime.text_padding_id
        for row in rows if self.runtime.graphs_per_row else rows[:1]:
            for size in warmup_sizes(self.max_chunk):
                for _ in range(2):
                    if self._stop.is_set():
                        return
                    if self.blocks:
                        self.read_block(row, [pad] * size)
                        self._silent_frame(rows)
                    else:
                        self.read_positions(row, [pad] * size)
        if self.options.chunk_limit is None and not self._stop.is_set():
            self.budget = measure_chunk_budget(
                run_frame=lambda: self._silent_frame(rows),
                run_prefill=lambda k: self.read_positions(0, [pad] * k),
                sync=self.runtime.sync,
                cap=self.max_chunk,
                margin=self.options.budget_margin,
                timing=self.options.budget_timing,
            )
        for row in rows:  # forget the warm-up: conversations start from an empty context
            self.book.reset(row)
            self.runtime.reset_row(row)
        if seed is not None and self.row_count > 1:
            self.runtime.seed(seed)

    # ---- the model's work, for the rows of one tick ---------------------------------------

    def step_rows(self, rows: Sequence[int], user: npt.NDArray[np.int64],
                  texts: Sequence[int | None], agents: Sequence[Sequence[int] | None] | None
                  = None) -> list[npt.NDArray[np.int64] | None]:
        """ONE step for `rows` (ascending): user codes [A, 8], a forced text id per row or
        None (and forced model codes, a conversation start's stepwise frames). Returns per
        row the frame out [1 + dep_q] or None while its delays fill."""
        stepping, columns = [], []
        for i, row in enumerate(rows):
            agent = None if agents is None else agents[i]
            prepared = self.book.prepare(row, user[i], agent, texts[i])
            if prepared is not None:
                stepping.append(row)
                columns.append(prepared)
        outs: dict[int, npt.NDArray[np.int64] | None] = dict.fromkeys(rows)
        if stepping:
            start = time.perf_counter()
            text, audio = self.runtime.step(stepping, columns)
            if self.ready.is_set():  # the conversations' steps, not the warm-up's
                self.step_times_ms.append((time.perf_counter() - start) * 1000.0)
                self.ticks += 1
            for j, row in enumerate(stepping):
                outs[row] = self.book.commit(row, int(text[j]), audio[j])
        return [outs[row] for row in rows]

    def _decode(self, rows: Sequence[int], outs: Sequence[npt.NDArray[np.int64] | None]
                ) -> list[npt.NDArray[np.float32]]:
        """Each row's PCM [1920]: the decoded frame, or silence while its delays fill."""
        pcm: list[npt.NDArray[np.float32]] = [np.zeros(FRAME_SAMPLES, dtype=np.float32)
                                              for _ in rows]
        speaking = [(i, out) for i, out in enumerate(outs) if out is not None]
        if speaking:
            count = self.codec.num_codebooks
            codes = np.stack([out[1 : 1 + count] for _i, out in speaking])  # [S, 8]
            decoded = self.codec.decode([rows[i] for i, _out in speaking], codes)  # [S, 1920]
            for (i, _out), frame in zip(speaking, decoded, strict=True):
                pcm[i] = frame
        return pcm

    def model_frame(self, rows: Sequence[int], pcm: npt.NDArray[np.float32],
                    texts: Sequence[int | None] | None = None
                    ) -> tuple[list[npt.NDArray[np.int64] | None], list[npt.NDArray[np.float32]]]:
        """One tick's model work for `rows` (ascending): Mimi encode of their PCM [A, 1920],
        ONE step, Mimi decode. Returns each row's frame out (None while its delays fill)
        and its PCM [1920]."""
        user = self.codec.encode(rows, pcm)  # [A, 8]
        outs = self.step_rows(rows, user, [None] * len(rows) if texts is None else texts)
        return outs, self._decode(rows, outs)

    def _silent_frame(self, rows: list[int]) -> None:
        self.model_frame(rows, np.zeros((len(rows), FRAME_SAMPLES), np.float32))

    def read_positions(self, row: int, token_ids: Sequence[int]) -> None:
        """A span chunk as positions: text ids in stream 0, the zero token (an exact zero
        embedding) in the audio streams; only the row's transformer advances."""
        columns = np.full((self.runtime.layout.num_codebooks, len(token_ids)), ZERO_TOKEN,
                          dtype=np.int64)
        columns[0] = np.asarray(list(token_ids), dtype=np.int64)
        self.runtime.read(row, columns)

    def read_block(self, row: int, token_ids: Sequence[int]) -> int:
        """A span block of `token_ids` after the row's pending column; returns n."""
        assert self.placeholders is not None
        block = block_columns(token_ids, self.placeholders, self.runtime.layout.num_codebooks)
        self.runtime.read(row, self.book.block(row, block))
        return int(block.shape[-1])

    def feed_start(self, row: int, plan: StartPlan, batched: bool = True) -> int:
        """A conversation start's forced frames for the row; returns the positions they
        took in the context. `batched`: their input columns in one forward (pieces of the
        longest read), else one frame at a time (what the one forward equals)."""
        positions = 0
        if plan.saved_voice is not None:
            saved = plan.saved_voice
            self.runtime.replay_embeddings(row, saved.embeddings)
            frames = int(saved.embeddings.shape[0])
            self.book.after_saved_voice(row, saved.ring.numpy(), frames)
            positions += frames
        return positions + self.prefill_forced(row, plan.steps, batched)

    def prefill_forced(self, row: int, steps: Sequence[ForcedStep], batched: bool = True
                       ) -> int:
        """Fully forced frames for the row, with a frame's bookkeeping; returns the
        positions they took. `batched`: their input columns in one forward (in pieces of
        the longest read), else one frame at a time (what the one forward equals)."""
        if batched:
            columns = self.book.forced_start(row, steps)  # [17, N]
            for start in range(0, columns.shape[1], self.max_chunk):
                self.runtime.read(row, columns[:, start : start + self.max_chunk])
            return int(columns.shape[1])
        positions = 0
        for forced in steps:
            before = int(self.book.offset[row])
            self.step_rows([row], np.asarray([forced.user], dtype=np.int64), [forced.text],
                           [forced.agent])
            positions += int(before > 0)
        return positions

    # ---- conversations joining and leaving ------------------------------------------------

    def _free(self, conversation: RowConversation, reason: str) -> None:
        with self._lock:
            if self._rows[conversation.row] is not conversation:
                return  # already freed
            self._rows[conversation.row] = None
        if conversation in self._live:
            self._live.remove(conversation)
        self._gather.forget(conversation.row)
        conversation.emit(EngineStopped(conversation.frame_index, reason))
        conversation.ended()
        if conversation.owns_host:  # nobody else will ever join this engine
            self._stop.set()

    def _fail(self, conversation: RowConversation, exc: Exception) -> None:
        log.exception("the conversation on row %d failed", conversation.row)
        conversation.emit(EngineError(f"{type(exc).__name__}: {exc}", fatal=True))
        self._free(conversation, "error")

    def _boundary(self) -> None:
        """Between two frames: conversations that asked to leave leave; new ones join."""
        for conversation in list(self._live):
            if conversation.leaving:
                self._free(conversation, "stopped")
        while True:
            try:
                conversation = self._joining.get_nowait()
            except queue.Empty:
                break
            if conversation.leaving:
                self._free(conversation, "stopped")
                continue
            try:
                self._admit(conversation)
            except Exception as exc:  # its start failed (a missing voice): it alone ends
                self._fail(conversation, exc)

    def _plan(self, options: EngineOptions) -> StartPlan | None:
        ck = self.checkpoint
        if ck.manifest.conversation_start.kind != "persona_prompt":
            return None
        assert self.placeholders is not None
        return plan_start(ck.manifest, ck.folder, ck.mimi, ck.tokenizer, self.placeholders,
                          self.runtime.text_padding_id, self.control_ids, voice=options.voice,
                          persona=options.role, user_name=options.user_name,
                          user_city=options.user_city)

    def _admit(self, conversation: RowConversation) -> None:
        """The conversation's row starts it: reset, Mimi stream, its start prefilled."""
        with self.codec.unstreamed():  # a voice recording is encoded in one pass
            plan = self._plan(conversation.options)
        row = conversation.row
        conversation.fit_to_budget(self.budget)
        self.book.reset(row)
        self.runtime.reset_row(row)
        self.codec.join(row)
        prompt_frames = 0
        if plan is not None:
            positions = self.feed_start(row, plan, conversation.options.batched_prefix)
            conversation.ledger.add_frames(positions)
            prompt_frames = len(plan.steps) + (plan.voice_frames if plan.saved_voice else 0)
        if self.options.seed is not None and self.row_count == 1:
            self.runtime.seed(self.options.seed)  # a conversation's tokens, reproducible
        self._live.append(conversation)
        self._gather.joined(row)
        conversation.ready.set()
        conversation.emit(EngineReady(
            model_id=self.checkpoint.manifest.id, device=self.runtime.device_label,
            dtype=self.dtype_label, chunk_limit=conversation.injector.chunk_limit,
            step_ms=None if self.budget is None else self.budget.step_ms,
            budget_ms=FRAME_MS * (1.0 - self.options.budget_margin),
            context_window=self.context_window, prompt_frames=prompt_frames,
            span_tokens=conversation.span_tokens))

    # ---- one tick -----------------------------------------------------------------------

    def _tick(self) -> None:
        self._boundary()
        frames: list[_Frame] = []
        for conversation, item in self._gather.next_tick(self._live, self._joining, self._stop):
            if item is END_OF_INPUT:
                self._free(conversation, "end of input")
            else:
                assert isinstance(item, np.ndarray)
                frames.append(_Frame(conversation, item))
        if frames:
            self._step(frames)

    def _step(self, frames: list[_Frame]) -> None:
        start = time.perf_counter()
        for frame in frames:  # each conversation's span work, on its row alone
            conversation = frame.conversation
            try:
                t0 = time.perf_counter()
                frame.span_events = conversation.before_frame()
                frame.inject_ms = (time.perf_counter() - t0) * 1000.0
            except Exception as exc:
                frame.failed = True
                self._fail(conversation, exc)
        frames = [f for f in frames if not f.failed]
        if not frames:
            return
        rows = [f.conversation.row for f in frames]
        model_start = time.perf_counter()
        texts = [self.ret_id if f.conversation.frame_index
                 in f.conversation.options.forced_ret_frames else None for f in frames]
        outs, pcm = self.model_frame(rows, np.stack([f.pcm for f in frames]), texts)
        # What each conversation waited for besides its own span: Mimi and the step.
        model_ms = (time.perf_counter() - model_start) * 1000.0
        for frame, out, frame_pcm in zip(frames, outs, pcm, strict=True):
            try:
                self._deliver(frame, None if out is None else int(out[0]), frame_pcm,
                              model_ms, start)
            except Exception as exc:
                self._fail(frame.conversation, exc)

    def _deliver(self, frame: _Frame, text_id: int | None, pcm: npt.NDArray[np.float32],
                 model_ms: float, tick_start: float) -> None:
        """The conversation's events for its frame: what it said, and its figures."""
        conversation = frame.conversation
        index = conversation.frame_index
        conversation.after_frame(model_ms, self.blocks)
        block = conversation.injector.last_block
        if block is not None:
            span_id, positions, prefill_ms = block
            total = prefill_ms + model_ms
            conversation.emit(BlockSlot(span_id, index, positions, prefill_ms, model_ms,
                                        total, total > FRAME_MS))
        conversation.ledger.add_frames(1)
        if text_id is not None and text_id == self.ret_id:
            conversation.emit(RetToken(index))
        restored = self.book.restored_text(conversation.row)
        shown = shown_text_id(restored if restored is not None else text_id,
                              self.checkpoint.tokenizer, self.control_ids)
        if shown is not None:
            piece = self.checkpoint.tokenizer.id_to_piece(shown).replace("▁", " ")
            conversation.emit(TextPiece(index, piece, shown))
        audio = AudioOut(index, pcm)
        conversation.emit(audio)
        for event in frame.span_events:  # what the user hears first of each span landed now
            if isinstance(event, SpanInjected):
                conversation.emit(FirstAudioAfterSpan(event.span_id, index, audio.monotonic_s))
                conversation.counters.span_landed()
        frame_ms = (time.perf_counter() - tick_start) * 1000.0
        conversation.emit(FrameStats(index, frame_ms, frame.inject_ms,
                                     conversation.ledger.usage()))
        conversation.counters.frame(frame_ms)
        conversation.frame_index += 1



def open_conversation(checkpoint: LoadedCheckpoint, options: EngineOptions | None = None,
                      events: queue.SimpleQueue[Any] | None = None) -> RowConversation:
    """One conversation on an engine of its own (one row): the desktop's and `run`'s. The
    engine warms up when the conversation starts and stops when it ends."""
    engine = LocalEngine(checkpoint, 1, options)
    conversation = engine.open(options, events, owns_engine=True)
    assert conversation is not None  # a new engine's one row is free
    return conversation
