"""A one-row engine driven without its thread: its own step, reads and forced frames, on its
own copy of the LM, for tests that compare two runs column by column."""

from __future__ import annotations

import copy
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import replace

import numpy as np
import torch
from moshi.models import LMModel

from app.engine.columns import ForcedStep
from app.engine.lm_runtime import Sampling
from app.engine.local_engine import LocalEngine
from app.engine.span_block import block_columns
from app.engine.speech_engine import EngineOptions
from app.engine.torch_runtime import TorchRuntime
from app.moshi_internals import kv_rings, ring_end


class DrivenEngine:
    """A one-row engine on its own copy of the LM (or on `lm`), driven without its thread
    (its step, its reads), recording every text-logit row the LM produced."""

    def __init__(self, ck, widen: int = 1, padded: bool | None = None,
                 capture: Callable | None = None, lm: LMModel | None = None) -> None:
        self.lm = copy.deepcopy(ck.lm) if lm is None else lm
        self.logits: list[torch.Tensor] = []
        original = self.lm.forward_text

        def recording(sequence, *args):
            if capture is not None:
                capture(sequence)
            out, text_logits = original(sequence, *args)
            self.logits.append(text_logits.detach().clone())
            return out, text_logits

        self.lm.forward_text = recording
        self.engine = LocalEngine(replace(ck, lm=self.lm), 1, EngineOptions(greedy=True))
        if padded is not None:
            self.engine.runtime = TorchRuntime(self.lm, Sampling(greedy=True), padded)
        self.runtime = self.engine.runtime
        self.book = self.engine.book
        self.engine.prepare_placeholders()
        self._streams = ExitStack()
        self._streams.enter_context(self.runtime.streaming(1, widen))

    @property
    def offset(self) -> int:
        return int(self.book.offset[0])

    def step(self, user: torch.Tensor, agent=None, text=None) -> np.ndarray | None:
        return self.engine.step_rows([0], user.numpy()[None], [text],
                                     None if agent is None else [agent])[0]

    def forced(self, steps: list[ForcedStep]) -> None:
        """One forced frame at a time, through the step."""
        self.engine.prefill_forced(0, steps, batched=False)

    def prefill_forced(self, steps: list[ForcedStep]) -> int:
        """The forced frames' input columns in one forward."""
        return self.engine.prefill_forced(0, steps)

    def read_block(self, ids: list[int], positions_per_forward: int | None = None) -> int:
        if positions_per_forward is None:
            return self.engine.read_block(0, ids)
        block = block_columns(ids, self.engine.placeholders, self.lm.num_codebooks)
        columns = self.book.block(0, block)
        for start in range(0, columns.shape[1], positions_per_forward):
            self.runtime.read(0, columns[:, start : start + positions_per_forward])
        return columns.shape[1]

    def kv(self) -> list[tuple[torch.Tensor, int]]:
        return [(ring.cache.clone(), ring_end(ring)) for ring in kv_rings(self.lm)]


