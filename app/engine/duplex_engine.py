"""The duplex engine: one thread owns Mimi, the LM (LMGen) and the injector.

Frames of 1920 samples (80 ms at 24 kHz) come in through a bounded queue; the model's PCM
frames, its text pieces and every span event go out through an event queue. Spans are
applied between two frames by this thread alone (single writer). The same loop serves a
live source (frames arrive in real time) and a file (frames are pushed as fast as the
queue accepts them).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass

import numpy as np
import torch
from moshi.models import LMGen

from app.checkpoints.loader import LoadedCheckpoint
from app.engine.context_ledger import ContextLedger
from app.engine.conversation_start import PersonaPrompt, PromptPlan
from app.engine.device import synchronize
from app.engine.events import (
    AudioOut,
    EngineError,
    EngineEvent,
    EngineReady,
    EngineStopped,
    FrameStats,
    SpanChunkInjected,
    TextPiece,
)
from app.engine.frame_budget import FRAME_MS, AdaptiveChunkLimit, measure_chunk_budget
from app.engine.kv_ring import widen_attention_rings
from app.engine.span_injector import SpanInjector, prefill
from app.engine.span_text import SpanTokenizer
from app.frame_worker import END_OF_INPUT, FRAME_SAMPLES, FrameWorker

log = logging.getLogger(__name__)

SAMPLE_RATE = 24000


@dataclass(frozen=True)
class EngineOptions:
    seed: int | None = None
    greedy: bool = False
    chunk_limit: int | None = None  # None: measure what fits in the frame budget here
    budget_margin: float = 0.25  # share of the 80 ms frame kept free
    input_queue_frames: int = 25  # 2 s of audio
    voice: str | None = None  # persona checkpoints: voice prompt name
    role: str | None = None  # persona checkpoints: role prompt (None: the manifest's)
    warmup_frames: int = 4


class DuplexEngine(FrameWorker):
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
        sampling = manifest.sampling
        self.lm_gen = LMGen(
            checkpoint.lm,
            use_sampling=not self.options.greedy,
            temp=sampling.temp,
            temp_text=sampling.temp_text,
            top_k=sampling.top_k,
            top_k_text=sampling.top_k_text,
            cfg_coef=sampling.cfg_coef,
        )
        self.context_window = int(checkpoint.lm.context or 0)
        self.ledger = ContextLedger(self.context_window)
        self.span_tokenizer = SpanTokenizer(
            checkpoint.tokenizer, manifest.span_wrapping, manifest.max_span_tokens
        )
        self.max_chunk = max(1, min(manifest.max_chunk_positions, self.options.chunk_limit
                                    or manifest.max_chunk_positions))
        self.injector = SpanInjector(self.lm_gen, self.span_tokenizer, self.ledger, self.max_chunk)
        # Events go to `events`; a pipeline passes one queue shared by all its stages.
        self.events: queue.SimpleQueue[EngineEvent] = events or queue.SimpleQueue()
        self.frame_index = 0
        self.ready = threading.Event()
        self.budget = None
        self.adaptive: AdaptiveChunkLimit | None = None  # None: a fixed chunk limit

    # ---- any thread -------------------------------------------------------------------

    def inject(self, text: str, source: str, at_frame: int = 0) -> int:
        """Queue a span (never blocks). `at_frame`: not before that frame index."""
        return self.injector.submit(text, source, not_before_frame=at_frame)

    # ---- engine thread ----------------------------------------------------------------

    def _emit(self, event: EngineEvent) -> None:
        self.events.put(event)

    def _run(self) -> None:
        reason = "stopped"
        try:
            with torch.no_grad():
                persona, plan = self._plan_conversation_start()
                with self.checkpoint.mimi.streaming(1), self.lm_gen.streaming(1):
                    self._prepare(persona, plan)
                    reason = self._loop()
        except Exception as exc:  # the thread must never die silently
            log.exception("engine failed")
            self._emit(EngineError(f"{type(exc).__name__}: {exc}", fatal=True))
            reason = "error"
        finally:
            self._emit(EngineStopped(self.frame_index, reason))

    def _device_sync(self) -> None:
        synchronize(self.checkpoint.device)

    def _plan_conversation_start(self) -> tuple[PersonaPrompt | None, PromptPlan | None]:
        ck = self.checkpoint
        start = ck.manifest.conversation_start
        if start.kind != "persona_prompt":
            return None, None
        role_tokenizer = SpanTokenizer(ck.tokenizer, start.role_wrapping, 10_000)
        persona = PersonaPrompt(self.lm_gen, ck.mimi, start, ck.folder, role_tokenizer)
        return persona, persona.plan(self.options.voice, self.options.role)

    def _prepare(self, persona: PersonaPrompt | None, plan: PromptPlan | None) -> None:
        ck = self.checkpoint
        if self.options.seed is not None:
            torch.manual_seed(self.options.seed)
        widen_attention_rings(ck.lm, self.max_chunk)
        silence = np.zeros(FRAME_SAMPLES, dtype=np.float32)
        pad = ck.lm.text_padding_token_id
        for _ in range(self.options.warmup_frames):  # also captures the CUDA graphs
            self._model_frame(silence)
        step_ms = None
        if self.options.chunk_limit is None:
            self.budget = measure_chunk_budget(
                run_frame=lambda: self._model_frame(silence),
                run_prefill=lambda k: prefill(self.lm_gen, [pad] * k),
                sync=self._device_sync,
                cap=self.max_chunk,
                margin=self.options.budget_margin,
            )
            step_ms = self.budget.step_ms
            self.injector.chunk_limit = self.budget.chunk_limit
            self.adaptive = AdaptiveChunkLimit(self.budget, self.max_chunk)
        # Forget the warm-up: the conversation starts from an empty context.
        ck.mimi.reset_streaming()
        self.lm_gen.reset_streaming()
        if self.options.seed is not None:
            torch.manual_seed(self.options.seed)
        prompt_frames = persona.feed(plan) if persona is not None and plan is not None else 0
        self.ledger.add_frames(prompt_frames)
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
            )
        )

    def _model_frame(self, pcm: np.ndarray) -> tuple[int | None, np.ndarray]:
        """Mimi encode, one LM step, Mimi decode. Returns (text token or None, PCM out)."""
        ck = self.checkpoint
        frame = torch.from_numpy(pcm).to(ck.device)[None, None]  # [1, 1, 1920]
        codes = ck.mimi.encode(frame)  # [1, 8, 1]
        tokens = self.lm_gen.step(codes)  # [1, 9, 1], None while the delays fill
        if tokens is None:
            return None, np.zeros(FRAME_SAMPLES, dtype=np.float32)
        out = ck.mimi.decode(tokens[:, 1:])  # [1, 1, 1920]
        return int(tokens[0, 0, 0]), out[0, 0].float().cpu().numpy()

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
            text_id, pcm_out = self._model_frame(item)  # type: ignore[arg-type]
            if self.adaptive is not None:
                synchronize(self.checkpoint.device)
                self.adaptive.observe_frame((time.perf_counter() - model_start) * 1000.0)
                self.injector.chunk_limit = self.adaptive.limit()
            self.ledger.add_frames(1)
            if text_id is not None and not (
                tokenizer.is_control(text_id) or tokenizer.is_unknown(text_id)
            ):
                piece = tokenizer.id_to_piece(text_id).replace("▁", " ")
                self._emit(TextPiece(self.frame_index, piece, text_id))
            self._emit(AudioOut(self.frame_index, pcm_out))
            frame_ms = (time.perf_counter() - start) * 1000.0
            self._emit(FrameStats(self.frame_index, frame_ms, inject_ms, self.ledger.usage()))
            self.frame_index += 1
        return "stopped"
