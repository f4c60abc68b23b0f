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

Continuous batching: a conversation joins or leaves at a frame boundary (the row host,
app/row_host.py, keeps the rows, the joins and leaves, and says why when the engine fails).
Joining resets its row; its conversation start (voice prompt, persona) is planned off this
thread and read for that row alone in pieces that fit beside the others' frames
(joining.py), so a join costs the others nothing they can hear; leaving frees the row. A
conversation owns its row from `open` to its end (row_conversation.py): one that is
stopped, or dropped before it started, gives its row back at once. A conversation's error
(a voice that does not exist, a span that fails) ends that one only; a conversation without
frames (a slow client) is simply not in the tick. The engine's own failure (a fault in the
shared step, a step that hangs) ends every conversation at once with the reason.

Engine-wide, not per conversation: sampling (greedy or not) and the seed, since the rows
share one sampling call (a one-row engine seeds each conversation after its start); the
frame budget, measured at warm-up with every row talking, from which each conversation's
chunk and span limits come when it joins, then follow the load (AdaptiveChunkLimit).
"""

from __future__ import annotations

import logging
import queue
import time
from collections import deque
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

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
from app.engine.joining import PlannedStart, StartPlanner, StartReads
from app.engine.lm_runtime import GraphCount
from app.engine.position_forwards import warmup_sizes
from app.engine.row_conversation import RowConversation
from app.engine.shown_text import shown_text_id
from app.engine.span_block import block_columns
from app.engine.span_text import SpanTokenizer
from app.engine.speech_engine import EngineOptions
from app.frames import FRAME_MS, FRAME_SAMPLES
from app.row_host import RowHost

if TYPE_CHECKING:
    from moshi.models import MimiModel

log = logging.getLogger(__name__)


@dataclass
class _Frame:
    conversation: RowConversation
    pcm: npt.NDArray[np.float32]
    span_events: list[EngineEvent] = field(default_factory=list)
    inject_ms: float = 0.0
    failed: bool = False


# A tick that takes longer is the engine's failure (a hung step): on a GPU a few dozen frame
# budgets; a CPU (the tiny models, tests on a busy machine) is given more.
STALL_S_GPU = 3.0
STALL_S_CPU = 15.0


class LocalEngine(RowHost[RowConversation]):
    what = "the speech engine"

    def __init__(self, checkpoint: LoadedCheckpoint, rows: int = 1,
                 options: EngineOptions | None = None, gather_ms: float = 20.0,
                 batched_mimi: bool = True) -> None:
        """`options`: the engine-wide ones (greedy, seed, chunk_limit, budget_margin,
        warmup_frames, stall_s; the MLX engine's Mimi). `gather_ms`: how long a tick waits,
        once one row has a frame, for the other talking rows' frames, so they share the
        step. `batched_mimi` (several rows): Mimi in one batched call per tick (False: one
        stream per row, bit for bit the one-row engine's PCM; app/mimi_codec.py)."""
        options = options or EngineOptions()
        manifest = checkpoint.manifest
        framework = framework_for(checkpoint, options, max(1, rows), batched_mimi)
        stall_s = options.stall_s
        if stall_s is None:
            on_gpu = framework.runtime.device_label.startswith("cuda")
            stall_s = STALL_S_GPU if on_gpu else STALL_S_CPU
        super().__init__("speech-engine", rows, gather_ms, stall_s)
        self.checkpoint = checkpoint
        self.options = options
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
        self.prepare_placeholders()  # Mimi encodes them before it streams (and starts use them)
        self.persona_start = manifest.conversation_start.kind == "persona_prompt"
        # Several rows: starts are planned on a thread of their own (joining.py); one row
        # has nobody else to keep waiting.
        self._planner = (StartPlanner(checkpoint.mimi, self._plan_for)
                         if rows > 1 and self.persona_start else None)
        self._starting: deque[StartReads[RowConversation]] = deque()  # joined, their start going in
        self.start_pieces = 0  # start reads run beside other conversations' frames (tests)
        # Measured at warm-up with every row talking (None with a fixed chunk limit).
        self.budget: ChunkBudget | None = None
        # The step's own time (book, LM, depformer: no Mimi, no span), the last minute.
        self.step_times_ms: deque[float] = deque(maxlen=750)

    # ---- any thread ---------------------------------------------------------------------

    def new_span_tokenizer(self) -> SpanTokenizer:
        manifest = self.checkpoint.manifest
        return SpanTokenizer(self.checkpoint.tokenizer, manifest.span_wrapping,
                             manifest.max_span_tokens, self.control_ids)

    def open(self, options: EngineOptions | None = None,
             events: queue.SimpleQueue[EngineEvent] | None = None, owns_engine: bool = False
             ) -> RowConversation | None:
        """A conversation on a free row, or None when every row is held. Its row is held
        from now on, until the conversation ends (or is stopped before it starts); it joins
        at the frame boundary after its `start()`. `owns_engine`: the engine is this
        conversation's alone (started by its start, stopped with it)."""
        options = options or EngineOptions()
        manifest = self.checkpoint.manifest
        if options.forced_ret_frames and (self.ret_id is None or manifest.generator != "forcing"):
            raise ValueError(f"{manifest.id} does not ask with <ret>: nothing to force")
        return self._hold(lambda row: RowConversation(self, row, options, events, owns_engine))

    def request_join(self, conversation: RowConversation) -> None:
        if self._planner is not None:  # its start planned first, off this thread
            self._planner.submit(conversation, super().request_join)
        else:
            super().request_join(conversation)

    def graph_count(self) -> GraphCount:
        """The CUDA graphs (and their pools) the engine holds: after the warm-up, all it
        will hold, whatever its number of rows."""
        return self.runtime.graph_count()

    # ---- the engine thread --------------------------------------------------------------

    @contextmanager
    def _serving(self) -> Iterator[None]:
        try:
            with self._model_to_itself(self.checkpoint.streaming), \
                    self.runtime.streaming(self.row_count, self.max_chunk), \
                    self.codec.streaming(self.row_count):
                self._warm_up()
                yield
        finally:
            if self._planner is not None:
                self._planner.close()

    def _error_event(self, message: str) -> EngineError:
        return EngineError(message, fatal=True)

    def _farewell(self, conversation: RowConversation, reason: str) -> None:
        conversation.emit(EngineStopped(conversation.frame_index, reason))

    def _forget(self, conversation: RowConversation) -> None:
        self._starting = deque(s for s in self._starting if s.conversation is not conversation)

    def _leaving(self) -> list[RowConversation]:
        return [c for c in [*self._live, *(s.conversation for s in self._starting)]
                if c.leaving]

    def _more_to_do(self) -> bool:
        return bool(self._starting)

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
        """A few frames on every row (kernels, CUDA graphs), a read of every padded size on
        one row (a graph is captured on a size's second use, and serves every row), the
        frame budget measured with every row talking, then every row reset."""
        seed = self.options.seed
        if seed is not None:
            self.runtime.seed(seed)
        rows = list(range(self.row_count))
        for row in rows:
            self.codec.join(row)
        for _ in range(self.options.warmup_frames):
            self._silent_frame(rows)
        pad = self.runtime.text_padding_id
        for size in warmup_sizes(self.max_chunk):  # the reads' graphs serve every row
            for _ in range(2):
                if self._stop.is_set():
                    return
                if self.blocks:
                    self.read_block(0, [pad] * size)
                    self._silent_frame(rows)
                else:
                    self.read_positions(0, [pad] * size)
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

    # ---- conversations joining ----------------------------------------------------------

    def _plan(self, options: EngineOptions, mimi: MimiModel) -> StartPlan | None:
        """The conversation's start (its voice encoded with `mimi`, not streaming)."""
        ck = self.checkpoint
        if not self.persona_start:
            return None
        assert self.placeholders is not None
        return plan_start(ck.manifest, ck.folder, mimi, ck.tokenizer, self.placeholders,
                          self.runtime.text_padding_id, self.control_ids, voice=options.voice,
                          persona=options.role, user_name=options.user_name,
                          user_city=options.user_city)

    def _plan_for(self, conversation: RowConversation, mimi: MimiModel) -> StartPlan | None:
        return self._plan(conversation.options, mimi)  # the planner's thread

    def _admit(self, conversation: RowConversation) -> None:
        """The conversation's row starts: reset, Mimi stream, its start's bookkeeping; its
        reads go in from the next tick on (`_advance_starts`)."""
        planned = conversation.planned
        if planned is None:  # one row: planned here, nobody else waits
            with self.codec.unstreamed():  # a voice recording is encoded in one pass
                planned = PlannedStart(self._plan(conversation.options, self.checkpoint.mimi))
        if planned.error is not None:
            raise planned.error
        plan = planned.plan
        row = conversation.row
        conversation.fit_to_budget(self.budget)
        self.book.reset(row)
        self.runtime.reset_row(row)
        self.codec.join(row)
        if plan is None:
            self._enter(conversation, 0)
            return
        prompt_frames = len(plan.steps) + (plan.voice_frames if plan.saved_voice else 0)
        if not conversation.options.batched_prefix:  # stepwise (what a batched start equals)
            conversation.ledger.add_frames(self.feed_start(row, plan, batched=False))
            self._enter(conversation, prompt_frames)
            return
        embeddings = None
        if plan.saved_voice is not None:
            saved = plan.saved_voice
            embeddings = saved.embeddings
            self.book.after_saved_voice(row, saved.ring.numpy(), int(embeddings.shape[0]))
        columns = self.book.forced_start(row, plan.steps)  # [17, N]
        self._starting.append(StartReads(conversation, prompt_frames, embeddings, columns))

    def _start_limit(self) -> int:
        """The positions a start reads in one tick beside the others' frames: the chunk
        that fits in the frame budget (measured at warm-up), or the fixed chunk limit."""
        if self.budget is not None:
            return max(1, min(self.max_chunk, self.budget.chunk_limit))
        return max(1, min(self.max_chunk, self.options.chunk_limit or self.max_chunk))

    def _advance_starts(self) -> None:
        """One piece of the oldest joining conversation's start, beside the live ones'
        frames; with nobody live, every start whole (the conversations that joined
        together start in step). A start that is in makes its conversation live."""
        alone = not self._live
        while self._starting:
            reads = self._starting[0]
            try:
                reads.read_next(self.runtime, self.max_chunk if alone else self._start_limit())
            except Exception as exc:  # its start failed: it alone ends
                self._starting.popleft()
                self._fail(reads.conversation, exc)
                continue
            if not alone:
                self.start_pieces += 1
            if reads.finished:
                self._starting.popleft()
                reads.conversation.ledger.add_frames(reads.total)
                self._enter(reads.conversation, reads.prompt_frames)
            if not alone:
                return

    def _boundary(self) -> None:
        super()._boundary()
        if self._starting and not self._live:  # nobody to keep waiting
            self._advance_starts()

    def _enter(self, conversation: RowConversation, prompt_frames: int) -> None:
        """Its start is in: its frames are stepped from the next tick on."""
        if self.options.seed is not None and self.row_count == 1:
            self.runtime.seed(self.options.seed)  # a conversation's tokens, reproducible
        self._go_live(conversation)
        conversation.emit(EngineReady(
            model_id=self.checkpoint.manifest.id, device=self.runtime.device_label,
            dtype=self.dtype_label, chunk_limit=conversation.injector.chunk_limit,
            step_ms=None if self.budget is None else self.budget.step_ms,
            budget_ms=FRAME_MS * (1.0 - self.options.budget_margin),
            context_window=self.context_window, prompt_frames=prompt_frames,
            span_tokens=conversation.span_tokens))

    # ---- one tick -----------------------------------------------------------------------

    def _step(self, items: Sequence[tuple[RowConversation, object]]) -> None:
        """The tick's frames (span work, Mimi, ONE step, delivered), then a piece of a
        joining conversation's start: after them, so it delays nobody's frame out."""
        frames = [_Frame(conversation, pcm) for conversation, pcm in items
                  if isinstance(pcm, np.ndarray)]
        if frames:
            self._frames(frames)
        if self._starting:
            self._advance_starts()

    def _frames(self, frames: list[_Frame]) -> None:
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
                      events: queue.SimpleQueue[EngineEvent] | None = None) -> RowConversation:
    """One conversation on an engine of its own (one row): the desktop's and `run`'s. The
    engine warms up when the conversation starts and stops when it ends."""
    engine = LocalEngine(checkpoint, 1, options)
    conversation = engine.open(options, events, owns_engine=True)
    assert conversation is not None  # a new engine's one row is free
    return conversation
