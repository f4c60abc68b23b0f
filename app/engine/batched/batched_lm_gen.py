"""moshi's LMGen streaming B conversations, one per row.

LMGen already keeps its frame bookkeeping per row (offsets [B], a token ring per row) and
honours exec_mask and reset_mask. Two things make its rows independent here: it is built
with `support_out_of_sync`, so a row still filling its delays (a conversation that just
joined) yields ungenerated tokens instead of the whole batch returning None; and a span's
positions go through the temporal transformer for their row alone (row_view.py), leaving
LMGen's own bookkeeping untouched, as in the single-conversation engine.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import ExitStack

import torch
from moshi.models import LMGen, LMModel

from app.engine.batched.row_view import prefill_row_positions
from app.engine.forcing_generator import ForcedStep
from app.moshi_internals import streaming_state


class BatchedLMGen:
    def __init__(self, lm_model: LMModel, use_sampling: bool = True, temp: float = 0.8,
                 temp_text: float = 0.7, top_k: int = 250, top_k_text: int = 25,
                 cfg_coef: float = 1.0) -> None:
        if cfg_coef != 1.0:
            raise NotImplementedError("the batched engine does not run classifier-free guidance")
        self.lm_model = lm_model
        self.gen = LMGen(lm_model, use_sampling=use_sampling, temp=temp, temp_text=temp_text,
                         top_k=top_k, top_k_text=top_k_text, support_out_of_sync=True)
        self._batch = 0

    def streaming(self, batch_size: int) -> ExitStack:
        self._batch = batch_size
        return self.gen.streaming(batch_size)

    def _mask(self, rows: Sequence[int]) -> torch.Tensor:
        mask = torch.zeros(self._batch, dtype=torch.bool, device=self.lm_model.device)
        mask[list(rows)] = True
        return mask

    def reset_row(self, row: int) -> None:
        self.gen.reset_streaming(self._mask([row]))

    def step(self, rows: Sequence[int], user: torch.Tensor,
             text: Sequence[int | None]) -> list[torch.Tensor | None]:
        if any(t is not None for t in text):
            raise ValueError("LMGen cannot force the model's text")
        lm = self.lm_model
        codes = torch.zeros((self._batch, user.shape[1], 1), dtype=torch.long, device=lm.device)
        codes[list(rows), :, 0] = user.to(device=lm.device, dtype=torch.long)  # [B, 8, 1]
        self.gen.set_exec_mask(self._mask(rows))
        out = self.gen.step(codes)  # [B, 1 + dep_q, 1]; out of sync: never None
        assert out is not None
        state = streaming_state(self.gen)
        assert state is not None
        ready = (state.offsets > self.gen.max_delay).tolist()  # [B]
        return [out[r, :, 0].clone() if ready[r] else None for r in rows]

    def restored_text(self, row: int) -> int | None:
        return None

    def prefill_positions(self, row: int, token_ids: Sequence[int]) -> None:
        prefill_row_positions(self.lm_model, row, token_ids)

    def can_inject_block(self, row: int) -> bool:
        return False

    def inject_block(self, row: int, block: torch.Tensor) -> int:
        raise NotImplementedError("LMGen checkpoints take spans as positions")

    def prefill_forced(self, row: int, steps: Sequence[ForcedStep],
                       max_columns: int | None = None) -> int:
        raise NotImplementedError("LMGen cannot force a conversation start")

    def replay_embeddings(self, row: int, embeddings: torch.Tensor,
                          saved_ring: torch.Tensor) -> int:
        raise NotImplementedError("LMGen cannot replay a saved voice")
