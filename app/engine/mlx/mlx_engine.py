"""The duplex engine with its LM on MLX: `--device mlx`, and Apple Silicon's automatic choice.

The torch engine's thread, queues, events, span text, budgeting and injector (DuplexEngine,
SpanInjector), with the framework's part swapped:
- the generator is the MLX one the checkpoint was trained with (MlxLmGen for vanilla Moshi,
  MlxForcingGenerator for PersonaPlex and Context Spanning), whose rings hold the longest
  chunk or block exactly, as the torch engine widens its rings;
- a span chunk or a block is ONE forward through the MLX transformer and its KV ring;
- Mimi is the frame codec `EngineOptions.mimi` chooses (frame_codec.py): MLX's on Apple
  Silicon, torch's on the CPU elsewhere; a frame's 8 codes go to the MLX generator as
  ints, and the model's codes come back to the codec's decoder.
MLX runs no graph capture and no compile here, so the warm-up is a few frames (Mimi's and
the timing's), not every chunk shape.
"""

from __future__ import annotations

import queue
from collections.abc import Sequence
from typing import cast

import mlx.core as mx
import numpy as np
import torch

from app.engine.conversation_start import StartPlan
from app.engine.duplex_engine import DuplexEngine, EngineOptions, LmFacts
from app.engine.events import EngineReady
from app.engine.mlx.checkpoint import PRECISION_LABELS, MlxCheckpoint
from app.engine.mlx.forcing_generator import MlxForcingGenerator
from app.engine.mlx.frame_codec import FrameCodec, make_frame_codec
from app.engine.mlx.lm import ZERO_TOKEN
from app.engine.mlx.lm_gen import MlxLmGen
from app.engine.mlx.sampling import Sampling
from app.engine.span_injector import PrefillTarget, SpanInjector
from app.frames import FRAME_MS, FRAME_SAMPLES

MlxGenerator = MlxLmGen | MlxForcingGenerator


class MlxUnsupportedError(RuntimeError):
    """A checkpoint option the MLX engine does not run yet (the message says which)."""


def read_positions(gen: MlxGenerator, token_ids: Sequence[int]) -> None:
    """A span chunk's positions (text ids in stream 0, the zero token elsewhere) in ONE
    forward through the transformer: only its stream advances, as torch's `prefill`."""
    if not token_ids:
        return
    codes = np.full((gen.num_codebooks, len(token_ids)), ZERO_TOKEN, dtype=np.int64)
    codes[0] = np.asarray(token_ids, dtype=np.int64)
    out, _text_logits = gen.lm.forward_text(mx.array(codes[None]), gen.stream)
    mx.eval(out, *gen.stream.arrays())


class MlxSpanInjector(SpanInjector):
    """The span injector over an MLX generator: the same queueing, budget and events."""

    def _position_forwards(self, lm_gen: PrefillTarget) -> None:
        return None  # no graphs to capture by size on MLX

    def _read_positions(self, token_ids: Sequence[int]) -> None:
        read_positions(cast(MlxGenerator, self._lm_gen), token_ids)

    def _synchronize(self) -> None:
        pass  # each MLX forward ends in mx.eval: its work is done when it returns


class MlxEngine(DuplexEngine):
    injector_class = MlxSpanInjector
    checkpoint: MlxCheckpoint
    lm_gen: MlxGenerator  # type: ignore[assignment]

    def __init__(self, checkpoint: MlxCheckpoint, options: EngineOptions | None = None,
                 events: queue.SimpleQueue | None = None) -> None:
        super().__init__(checkpoint, options, events)
        self.codec: FrameCodec = make_frame_codec(checkpoint, self.options.mimi)

    def _lm_facts(self) -> LmFacts:
        shape = self.checkpoint.mlx_lm.shape
        return LmFacts(shape.context, shape.num_codebooks, shape.text_padding_id)

    def _make_generator(self) -> MlxGenerator:  # type: ignore[override]
        manifest = self.checkpoint.manifest
        sampling = manifest.sampling
        if manifest.generator != "forcing" and sampling.cfg_coef != 1.0:
            raise MlxUnsupportedError(f"{manifest.id} samples with classifier-free guidance "
                                      f"(cfg_coef {sampling.cfg_coef}), not run on MLX yet")
        choice = Sampling(greedy=self.options.greedy, temp=sampling.temp,
                          temp_text=sampling.temp_text, top_k=sampling.top_k,
                          top_k_text=sampling.top_k_text)
        lm = self.checkpoint.mlx_lm
        # max_chunk is known only after the span tokenizer: _prepare sizes the rings.
        if manifest.generator == "forcing":
            return MlxForcingGenerator(lm, choice)
        return MlxLmGen(lm, choice)

    # ---- engine thread ----------------------------------------------------------------

    def _seed(self) -> None:
        if self.options.seed is not None:
            torch.manual_seed(self.options.seed)  # Mimi's side, as the torch engine seeds
            mx.random.seed(self.options.seed)

    def _prepare(self, plan: StartPlan | None) -> None:
        ck, gen = self.checkpoint, self.lm_gen
        self._seed()
        gen.max_chunk = self.max_chunk  # the rings hold the longest chunk or block exactly
        gen.reset()
        silence = np.zeros(FRAME_SAMPLES, dtype=np.float32)
        pad = ck.mlx_lm.shape.text_padding_id
        for _ in range(self.options.warmup_frames):
            self._model_frame(silence)
        step_ms = self._measure_budget(silence, lambda k: read_positions(gen, [pad] * k),
                                       lambda: None)
        # Forget the warm-up: the conversation starts from an empty context.
        self.codec.reset()
        gen.reset_streaming()
        prompt_frames = 0
        if plan is not None:
            self.ledger.add_frames(self._feed_start(plan))
            prompt_frames = len(plan.steps)
        self._seed()
        self.ready.set()
        self._emit(EngineReady(
            model_id=ck.manifest.id, device="mlx", dtype=PRECISION_LABELS[ck.precision],
            chunk_limit=self.injector.chunk_limit, step_ms=step_ms,
            budget_ms=FRAME_MS * (1.0 - self.options.budget_margin),
            context_window=self.context_window, prompt_frames=prompt_frames,
            span_tokens=self.span_tokens))

    def _feed_start(self, plan: StartPlan) -> int:
        gen = self.lm_gen
        assert isinstance(gen, MlxForcingGenerator)
        if plan.saved_voice is not None:
            raise MlxUnsupportedError("a saved PersonaPlex voice prompt (.pt embeddings) is "
                                      "not replayed on MLX yet: choose a voice recording")
        if self.options.batched_prefix:
            return gen.prefill_forced(plan.steps, max_columns=self.max_chunk)
        positions = 0
        for forced in plan.steps:  # one frame at a time: what the batched forward equals
            before = gen.offset
            gen.step(forced.user, forced.agent, forced.text)
            positions += int(before > 0)
        return positions

    def _model_frame(self, pcm: np.ndarray) -> tuple[int | None, np.ndarray]:
        """Mimi encode (the codec's), one MLX LM step, Mimi decode."""
        codec = self.codec
        user = codec.encode_frame(pcm).tolist()  # [8]
        gen = self.lm_gen
        if isinstance(gen, MlxForcingGenerator):
            forced_ret = (self.ret_id if self.ready.is_set()
                          and self.frame_index in self.options.forced_ret_frames else None)
            tokens = gen.step(user, None, forced_ret)
        else:
            tokens = gen.step(user)
        if tokens is None:
            return None, np.zeros(FRAME_SAMPLES, dtype=np.float32)
        return int(tokens[0]), codec.decode_frame(tokens[1 : 1 + codec.num_codebooks])

    def _shown_text(self, text_id: int | None) -> int | None:
        gen = self.lm_gen
        if isinstance(gen, MlxForcingGenerator) and gen.restored_text is not None:
            text_id = gen.restored_text  # the text the block swallowed (see the torch one)
        return super()._shown_text(text_id)
