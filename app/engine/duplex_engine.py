"""The duplex engine: one thread owns Mimi, the LM's generator and the injector.

Frames of 1920 samples (80 ms at 24 kHz) come in through a bounded queue; the model's PCM
frames, its text pieces and every span event go out through an event queue. Spans are
applied between two frames by this thread alone (single writer). The same loop serves a
live source (frames arrive in real time) and a file (frames are pushed as fast as the
queue accepts them).

The generator is the one the checkpoint was trained with (its manifest's `generator`):
moshi's own LMGen for vanilla Moshi, the forcing generator for PersonaPlex and its Context
Spanning fine-tune (whose conversation starts with a forced prefix, and which emits <ret>
when it wants information: a `RetToken` event, never a word).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypedDict

import numpy as np
import torch
from moshi.models import LMGen

from app.checkpoints.loader import LoadedCheckpoint
from app.engine.context_ledger import ContextLedger
from app.engine.conversation_start import Placeholders, StartPlan, placeholder_codes, plan_start
from app.engine.device import synchronize
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
    SpanChunkInjected,
    SpanInjected,
    TextPiece,
)
from app.engine.forcing_generator import ForcingGenerator
from app.engine.frame_budget import (
    AdaptiveChunkLimit,
    BudgetTiming,
    ChunkBudget,
    measure_chunk_budget,
)
from app.engine.kv_ring import widen_attention_rings
from app.engine.position_forwards import warmup_sizes, widest_forward
from app.engine.shown_text import shown_text_id
from app.engine.span_block import block_columns
from app.engine.span_injector import SpanInjector, prefill
from app.engine.span_text import SpanTokenizer
from app.frame_worker import END_OF_INPUT, FrameWorker
from app.frames import FRAME_MS, FRAME_SAMPLES

log = logging.getLogger(__name__)



@dataclass(frozen=True)
class EngineOptions:
    seed: int | None = None
    greedy: bool = False
    chunk_limit: int | None = None  # None: measure what fits in the frame budget here
    budget_margin: float = 0.25  # share of the 80 ms frame kept free
    input_queue_frames: int = 25  # 2 s of audio
    voice: str | None = None  # persona checkpoints: voice prompt name (or a file)
    role: str | None = None  # persona checkpoints: persona text (None: the manifest's)
    user_name: str | None = None  # persona checkpoints trained on the user's name and city
    user_city: str | None = None
    warmup_frames: int = 4
    batched_prefix: bool = True  # the start's forced frames in one forward (False: stepwise)
    # Frames at which the model's text is forced to its <ret> id (the forcing generator's
    # text forcing; the reference has the same switch, off by default): lets a model with
    # random weights, which never asks on its own, walk through the retrieval flow.
    forced_ret_frames: frozenset[int] = frozenset()
    # The MLX engine's Mimi: "mlx", "torch" or "auto" (MLX on Apple Silicon, torch on
    # other CPUs: app/engine/mlx/frame_codec.py). The torch engine always runs torch's.
    mimi: str = "auto"
    # A test hook on the frame budget measured at warm-up (frame_budget.BudgetTiming): the
    # timings to use instead of the measured ones; the forwards still run.
    budget_timing: BudgetTiming | None = None


@dataclass(frozen=True)
class LmFacts:
    """What the engine reads of its LM besides running it. The torch engine reads them off
    moshi's LMModel; the MLX engine off its own LM (its checkpoint holds no torch LM)."""

    context: int  # positions in the context window (0: none)
    num_codebooks: int  # streams in a column (17: text, the model's 8, the user's 8)
    text_padding_id: int


class _SamplingArguments(TypedDict):
    """The sampling arguments moshi's LMGen and the forcing generator share."""

    use_sampling: bool
    temp: float
    temp_text: float
    top_k: int
    top_k_text: int


class EngineStoppedError(RuntimeError):
    """A span offered to an engine that has stopped."""


class DuplexEngine(FrameWorker):
    # The framework's part (the MLX engine, app/engine/mlx/mlx_engine.py, has its own).
    injector_class: type[SpanInjector] = SpanInjector

    def __init__(
        self,
        checkpoint: LoadedCheckpoint,
        options: EngineOptions | None = None,
        events: queue.SimpleQueue | None = None,
    ) -> None:
        self.options = options or EngineOptions()
        super().__init__(self.options.input_queue_frames, "duplex-engine")
        self.checkpoint = checkpoint
        manifest = checkpoint.manifest
        self.lm_gen = self._make_generator()
        self.lm_facts = self._lm_facts()
        self.context_window = self.lm_facts.context
        self.ledger = ContextLedger(self.context_window)
        retrieval = manifest.retrieval
        self.ret_id = retrieval.ret_id if retrieval.trigger == "ret_token" else None
        wrapping = manifest.span_wrapping
        self.control_ids = manifest.control_ids
        self.span_tokenizer = SpanTokenizer(
            checkpoint.tokenizer, wrapping, manifest.max_span_tokens, self.control_ids
        )
        if self.options.forced_ret_frames and (
                self.ret_id is None or manifest.generator != "forcing"):
            raise ValueError(f"{manifest.id} does not ask with <ret>: nothing to force")
        self.blocks = manifest.span_placement.kind == "block"
        if self.blocks:  # a block is never split: the rings must hold the longest one
            self.max_chunk = self.span_tokenizer.max_tokens
        else:
            self.max_chunk = max(1, min(manifest.max_chunk_positions, self.options.chunk_limit
                                        or manifest.max_chunk_positions))
        self.placeholders: Placeholders | None = None  # block codes, set before streaming
        self.injector = self.injector_class(
            self.lm_gen, self.span_tokenizer, self.ledger, self.max_chunk,
            block_columns=self._block_columns if self.blocks else None,
        )
        # Events go to `events`; a pipeline passes one queue shared by all its stages.
        self.events: queue.SimpleQueue[EngineEvent] = events or queue.SimpleQueue()
        self.frame_index = 0
        self.ready = threading.Event()
        self.budget: ChunkBudget | None = None
        self.adaptive: AdaptiveChunkLimit | None = None  # None: a fixed chunk limit

    def _make_generator(self) -> LMGen | ForcingGenerator:
        """The generator the checkpoint was trained with (its manifest's `generator`)."""
        manifest = self.checkpoint.manifest
        sampling = manifest.sampling
        sampling_kwargs = _SamplingArguments(
            use_sampling=not self.options.greedy, temp=sampling.temp,
            temp_text=sampling.temp_text, top_k=sampling.top_k, top_k_text=sampling.top_k_text)
        if manifest.generator == "forcing":
            return ForcingGenerator(self.checkpoint.lm, **sampling_kwargs)
        return LMGen(self.checkpoint.lm, cfg_coef=sampling.cfg_coef, **sampling_kwargs)

    def _lm_facts(self) -> LmFacts:
        lm = self.checkpoint.lm
        return LmFacts(int(lm.context or 0), lm.num_codebooks, lm.text_padding_token_id)

    # ---- any thread -------------------------------------------------------------------

    def inject(self, text: str, source: str, at_frame: int = 0,
               origin_frame: int | None = None, deadline_frame: int | None = None) -> int:
        """Queue a span (never blocks). `at_frame`: not before that frame index. A span that
        answers a <ret> names its frame and the last frame it may land before.

        Refused (EngineStoppedError) once the conversation has ended: it would never land."""
        if self._stop.is_set() or (self._thread is not None and not self._thread.is_alive()):
            raise EngineStoppedError(
                f"the conversation has ended: the span from {source} was not injected")
        return self.injector.submit(text, source, not_before_frame=at_frame,
                                    origin_frame=origin_frame, deadline_frame=deadline_frame)

    # ---- engine thread ----------------------------------------------------------------

    def _emit(self, event: EngineEvent) -> None:
        self.events.put(event)

    def _block_columns(self, ids: Sequence[int]) -> torch.Tensor:
        assert self.placeholders is not None
        return block_columns(ids, self.placeholders, self.lm_facts.num_codebooks)

    def _run(self) -> None:
        reason = "stopped"
        try:
            with torch.no_grad():
                plan = self._plan_conversation_start()
                with self.checkpoint.mimi.streaming(1), self.lm_gen.streaming(1):
                    self._prepare(plan)
                    reason = self._loop()
        except Exception as exc:  # the thread must never die silently
            log.exception("engine failed")
            self._emit(EngineError(f"{type(exc).__name__}: {exc}", fatal=True))
            reason = "error"
        finally:
            self._emit(EngineStopped(self.frame_index, reason))

    def _measure_budget(self, silence: np.ndarray, run_prefill: Callable[[int], object],
                        sync: Callable[[], None]) -> float | None:
        """Without a fixed chunk limit: what fits in a frame on this device, measured now
        (the step's time in ms), and the injector's limit from it; None with a fixed one."""
        if self.options.chunk_limit is not None:
            return None
        self.budget = measure_chunk_budget(
            run_frame=lambda: self._model_frame(silence),
            run_prefill=run_prefill,
            sync=sync,
            cap=self.max_chunk,
            margin=self.options.budget_margin,
            timing=self.options.budget_timing,
        )
        self.injector.chunk_limit = self.budget.chunk_limit
        self.adaptive = AdaptiveChunkLimit(self.budget, self.max_chunk)
        if self.blocks:
            self.span_tokenizer.fit_to_budget(self.budget.chunk_limit, self.max_chunk)
        return self.budget.step_ms

    @property
    def span_tokens(self) -> int:
        """The most content tokens one span carries (the LLM's answer budget): for blocks,
        what fits in the frame on this device once measured (EngineReady)."""
        return self.span_tokenizer.content_budget

    def _device_sync(self) -> None:
        synchronize(self.checkpoint.device)

    def _plan_conversation_start(self) -> StartPlan | None:
        """Placeholder codes and the start's forced frames, encoded before Mimi streams."""
        ck = self.checkpoint
        manifest = ck.manifest
        start = manifest.conversation_start
        if self.blocks or start.kind == "persona_prompt":
            placement = manifest.span_placement
            self.placeholders = placeholder_codes(
                ck.mimi, placement.agent_codes or start.agent_silence_codes,
                placement.user_codes or start.user_tone_codes)
        if start.kind != "persona_prompt":
            return None
        assert self.placeholders is not None
        options = self.options
        return plan_start(manifest, ck.folder, ck.mimi, ck.tokenizer, self.placeholders,
                          self.lm_facts.text_padding_id, self.control_ids, voice=options.voice,
                          persona=options.role, user_name=options.user_name,
                          user_city=options.user_city)

    def _feed_start(self, plan: StartPlan) -> int:
        """The start's forced frames; returns the positions they took in the context."""
        gen = self.lm_gen
        assert isinstance(gen, ForcingGenerator)
        positions = 0
        if plan.saved_voice is not None:
            positions += gen.replay_embeddings(plan.saved_voice.embeddings,
                                               plan.saved_voice.ring)
        if self.options.batched_prefix:
            return positions + gen.prefill_forced(plan.steps, max_columns=self.max_chunk)
        device = self.checkpoint.device
        for forced in plan.steps:  # one frame at a time: what the batched forward equals
            before = gen.offset
            gen.step(torch.tensor([forced.user], device=device)[:, :, None],
                     torch.tensor([forced.agent], device=device)[:, :, None],
                     torch.tensor([forced.text], device=device))
            positions += int(before > 0)
        return positions

    def _prepare(self, plan: StartPlan | None) -> None:
        ck = self.checkpoint
        if self.options.seed is not None:
            torch.manual_seed(self.options.seed)
        # Room for the widest forward: on a GPU a read is padded to a graphed size.
        widen_attention_rings(ck.lm, widest_forward(ck.lm, self.max_chunk))
        silence = np.zeros(FRAME_SAMPLES, dtype=np.float32)
        pad = ck.lm.text_padding_token_id
        for _ in range(self.options.warmup_frames):  # also captures the CUDA graphs
            self._model_frame(silence)
        # A forward of a new shape can be slow the first time (kernel selection, or a
        # recompile under torch.compile): meet every chunk shape before the first frame.
        # Each size twice: CUDA graphs are captured on a size's second use.
        if self.blocks and isinstance(self.lm_gen, ForcingGenerator):
            # On a GPU a block is read padded to a graphed size (position_forwards.py):
            # a block of each size up to the longest meets every graph.
            for size in warmup_sizes(self.max_chunk):
                for _ in range(2):
                    self.lm_gen.inject_block(self._block_columns([pad] * size))
                    self._model_frame(silence)
        else:
            for size in warmup_sizes(self.max_chunk):
                for _ in range(2):
                    prefill(self.lm_gen, [pad] * size, self.injector.forwards)
        step_ms = self._measure_budget(
            silence, lambda k: prefill(self.lm_gen, [pad] * k, self.injector.forwards),
            self._device_sync)
        # Forget the warm-up: the conversation starts from an empty context.
        ck.mimi.reset_streaming()
        self.lm_gen.reset_streaming()
        prompt_frames = 0
        if plan is not None:
            self.ledger.add_frames(self._feed_start(plan))
            prompt_frames = len(plan.steps) + (plan.voice_frames if plan.saved_voice else 0)
        if self.options.seed is not None:
            torch.manual_seed(self.options.seed)
        self.ready.set()
        self._emit(
            EngineReady(
                model_id=ck.manifest.id,
                device=str(ck.device),
                dtype=str(ck.dtype).removeprefix("torch."),
                chunk_limit=self.injector.chunk_limit,
                step_ms=step_ms,
                budget_ms=FRAME_MS * (1.0 - self.options.budget_margin),
                context_window=self.context_window,
                prompt_frames=prompt_frames,
                span_tokens=self.span_tokens,
            )
        )

    def _model_frame(self, pcm: np.ndarray) -> tuple[int | None, np.ndarray]:
        """Mimi encode, one LM step, Mimi decode. Returns (text token or None, PCM out)."""
        ck = self.checkpoint
        frame = torch.from_numpy(pcm).to(ck.device)[None, None]  # [1, 1, 1920]
        codes = ck.mimi.encode(frame)  # [1, 8, 1]
        # [1, 1 + dep_q, 1]: text, the model's 8 codes (then the user's 8 with dep_q 16);
        # None while the delays fill.
        if self.ready.is_set() and self.frame_index in self.options.forced_ret_frames:
            ret = torch.tensor([self.ret_id], device=ck.device)
            assert isinstance(self.lm_gen, ForcingGenerator)  # forced <ret>: checked in __init__
            tokens = self.lm_gen.step(codes, None, ret)
        else:
            tokens = self.lm_gen.step(codes)
        if tokens is None:
            return None, np.zeros(FRAME_SAMPLES, dtype=np.float32)
        out = ck.mimi.decode(tokens[:, 1 : 1 + ck.mimi.num_codebooks])  # [1, 1, 1920]
        return int(tokens[0, 0, 0]), out[0, 0].float().cpu().numpy()

    def _shown_text(self, text_id: int | None) -> int | None:
        """The id whose piece the transcript shows for this frame, or None.

        The first frame after a block carries the block's closing id; the text the block
        swallowed (the pending column's, never returned by the reference) is shown instead.
        """
        gen = self.lm_gen
        if isinstance(gen, ForcingGenerator) and gen.state.restored_text is not None:
            text_id = int(gen.state.restored_text[0])
        return shown_text_id(text_id, self.checkpoint.tokenizer, self.control_ids)

    def _loop(self) -> str:
        tokenizer = self.checkpoint.tokenizer
        while not self._stop.is_set():
            item = self._next_frame()
            if item is None:
                continue
            if item is END_OF_INPUT:
                return "end of input"
            start = time.perf_counter()
            span_events = self.injector.before_frame(self.frame_index)
            inject_ms = (time.perf_counter() - start) * 1000.0
            for event in span_events:
                self._emit(event)
                if self.adaptive is not None and isinstance(event, SpanChunkInjected):
                    self.adaptive.observe_chunk(event.k, event.prefill_ms)
            model_start = time.perf_counter()
            # The input queue holds objects: the frames, and END_OF_INPUT (handled above).
            text_id, pcm_out = self._model_frame(item)  # type: ignore[arg-type]
            block = self.injector.last_block
            if self.adaptive is not None or block is not None:
                synchronize(self.checkpoint.device)
                model_ms = (time.perf_counter() - model_start) * 1000.0
                if self.adaptive is not None and not self.blocks:
                    self.adaptive.observe_frame(model_ms)
                    self.injector.chunk_limit = self.adaptive.limit()
                if block is not None:
                    span_id, positions, prefill_ms = block
                    total = prefill_ms + model_ms
                    self._emit(BlockSlot(span_id, self.frame_index, positions, prefill_ms,
                                         model_ms, total, total > FRAME_MS))
            self.ledger.add_frames(1)
            if text_id is not None and text_id == self.ret_id:
                self._emit(RetToken(self.frame_index))
            shown = self._shown_text(text_id)
            if shown is not None:
                piece = tokenizer.id_to_piece(shown).replace("▁", " ")
                self._emit(TextPiece(self.frame_index, piece, shown))
            audio = AudioOut(self.frame_index, pcm_out)
            self._emit(audio)
            for event in span_events:  # what the user hears first of each span landed now
                if isinstance(event, SpanInjected):
                    self._emit(FirstAudioAfterSpan(event.span_id, self.frame_index,
                                                   audio.monotonic_s))
            frame_ms = (time.perf_counter() - start) * 1000.0
            self._emit(FrameStats(self.frame_index, frame_ms, inject_ms, self.ledger.usage()))
            self.frame_index += 1
        return "stopped"
