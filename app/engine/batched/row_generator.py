"""What the batched engine asks of a generator that streams B conversations, one per row.

Two implementations: batched_lm_gen.py (moshi's LMGen, vanilla Moshi) and
batched_forcing.py (the forcing generator of PersonaPlex and Context Spanning). A frame is
ONE batched step over the rows that have a frame (the others do not advance: exec_mask);
everything that concerns one conversation alone (its reset, its start, a span) runs on its
row alone (row_view.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import ExitStack
from typing import Protocol

import torch
from moshi.models import LMModel

from app.engine.forcing_generator import ForcedStep


class RowGenerator(Protocol):
    lm_model: LMModel

    def streaming(self, batch_size: int) -> ExitStack: ...

    def reset_row(self, row: int) -> None:
        """The row starts a new conversation: an empty context, offsets 0."""

    def step(self, rows: Sequence[int], user: torch.Tensor,
             text: Sequence[int | None]) -> list[torch.Tensor | None]:
        """ONE batched frame for `rows` (user codes [len(rows), 8]; `text`, a forced text id
        per row or None). Returns per row the frame out [1 + dep_q] or None while its delays
        fill. The other rows do not advance."""

    def restored_text(self, row: int) -> int | None:
        """The text a block swallowed, shown for the row's frame just stepped (or None)."""

    def prefill_positions(self, row: int, token_ids: Sequence[int]) -> None:
        """A span chunk as positions (text ids, zero audio), for the row alone."""

    def can_inject_block(self, row: int) -> bool: ...

    def inject_block(self, row: int, block: torch.Tensor) -> int:
        """A span block [17, n] after the row's pending column, for the row alone."""

    def prefill_forced(self, row: int, steps: Sequence[ForcedStep],
                       max_columns: int | None = None) -> int:
        """A conversation start's forced frames, for the row alone."""

    def replay_embeddings(self, row: int, embeddings: torch.Tensor,
                          saved_ring: torch.Tensor) -> int:
        """A saved voice prompt (PersonaPlex `.pt`), for the row alone."""
