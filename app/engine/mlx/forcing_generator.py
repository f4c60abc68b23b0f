"""The forcing generator on MLX: PersonaPlex's and Context Spanning's bookkeeping, exactly as
the torch engine's `app/engine/forcing_generator.py` keeps it (batch 1).

- A ring of 4 columns of the 17 rows with a `provided` flag per cell; `offset` is the next
  target column. `step(user, agent, text)` writes each given row at offset + its delay
  (the user frame lands in the target column), feeds column offset - 1 in ONE forward,
  samples the text (the depformer sees the provided text, if any), runs all dep_q
  depformer steps teacher-forced where a value is provided, writes samples only where
  nothing was, and returns column offset - 1's frame (None while the delays fill).
- `prefill_forced(steps)`: a conversation's forced start, its input columns forwarded in
  one pass (pieces of `max_columns`, as the torch engine cuts them).
- `inject_block(block)`: a span block, ONE forward over [pending column] + block[:n-1]; the
  newest block columns go into the ring, offset advances by n; the first frame out after
  it carries the pending column's semantic code, and its text is kept as `restored_text`.
The ring is a few ints on the host; the transformer and the depformer run on MLX.
"""

from __future__ import annotations

from collections.abc import Sequence

import mlx.core as mx
import numpy as np

from app.engine.forcing_generator import ForcedStep
from app.engine.mlx.generator_base import UNGENERATED, MlxGeneratorBase
from app.engine.mlx.lm import MlxLm
from app.engine.mlx.sampling import Sampling, sample

RING = 4  # the input, the target, the target's delayed rows, one spare


class MlxForcingGenerator(MlxGeneratorBase):
    def __init__(self, lm: MlxLm, sampling: Sampling, max_chunk: int = 1) -> None:
        """`max_chunk`: the longest block (or prefix piece), which the rings hold exactly."""
        per_side = lm.shape.n_q // 2  # 8 agent rows, then 8 user rows
        self.per_side = per_side
        self.agent_rows = np.arange(1, 1 + per_side)
        self.user_rows = np.arange(1 + per_side, lm.shape.num_codebooks)
        super().__init__(lm, sampling, max_chunk)

    def _reset_bookkeeping(self) -> None:
        self.ring = np.full((self.num_codebooks, RING), UNGENERATED, dtype=np.int64)
        self.provided = np.zeros((self.num_codebooks, RING), dtype=bool)
        # After a block: the swallowed column's (semantic code, text), restored on the next
        # frame out; kept from the first of two adjacent blocks.
        self.pending_exit: tuple[int, int] | None = None
        self.restored_text: int | None = None

    # ---- one frame -----------------------------------------------------------------------

    def _write_rows(self, rows: np.ndarray, values: Sequence[int]) -> None:
        columns = (self.offset + self.delays[rows]) % RING
        self.ring[rows, columns] = np.asarray(values, dtype=np.int64).reshape(-1)
        self.provided[rows, columns] = True

    def _prepare(self, user: Sequence[int] | None, agent: Sequence[int] | None,
                 text: int | None) -> tuple[int, int] | None:
        if user is not None:
            self._write_rows(self.user_rows, user)
        if agent is not None:
            self._write_rows(self.agent_rows, agent)
        if text is not None:
            column = (self.offset + int(self.delays[0])) % RING
            self.ring[0, column] = int(text)
            self.provided[0, column] = True
        young = np.flatnonzero(self.offset <= self.delays)
        if young.size:
            column = self.offset % RING
            self.ring[young, column] = self.initial[young]
            self.provided[young, column] = True
        if self.offset == 0:
            self.ring[:, 0] = self.initial
            self.offset = 1
            return None
        return (self.offset - 1) % RING, self.offset % RING

    def _forward(self, columns: np.ndarray) -> tuple[mx.array, mx.array]:
        """Columns [17, T] through the temporal transformer in one call."""
        return self.lm.forward_text(mx.array(columns[None]), self.stream)

    def step(self, user: Sequence[int] | None = None, agent: Sequence[int] | None = None,
             text: int | None = None) -> np.ndarray | None:
        """One frame: the user's 8 codes (agent codes and text force the model's rows).
        Returns [1 + dep_q] (text, the model's 8 codes, the user's 8 with dep_q 16) or
        None while the delays fill."""
        prepared = self._prepare(user, agent, text)
        if prepared is None:
            return None
        input_column, target_column = prepared
        out, text_logits = self._forward(self.ring[:, input_column : input_column + 1])
        s = self.sampling
        sampled_text = sample(text_logits[:, -1], s.greedy, s.temp_text, s.top_k_text)
        target = self.ring[:, target_column].copy()
        given = self.provided[:, target_column].copy()
        previous = mx.array([int(target[0])]) if given[0] else sampled_text
        depformer = self.lm.new_depformer_stream()
        sampled_audio: list[mx.array] = []
        for index in range(self.dep_q):
            logits = self.lm.forward_depformer(previous, out, depformer)
            token = sample(logits, s.greedy, s.temp, s.top_k)
            sampled_audio.append(token)
            row = 1 + index
            previous = mx.array([int(target[row])]) if given[row] else token
        mx.eval(sampled_text, *sampled_audio, *self.stream.arrays())
        self.provided[:, input_column] = False
        rows = np.arange(1 + self.dep_q)
        sampled = np.array([int(sampled_text[0])] + [int(t[0]) for t in sampled_audio])
        self.ring[rows, target_column] = np.where(given[rows], target[rows], sampled)
        if self.offset <= self.max_delay:
            self.offset += 1
            return None
        columns = (self.offset - self.max_delay + self.delays[rows]) % RING
        frame = self.ring[rows, columns].copy()
        self.offset += 1
        self.restored_text = None
        if self.pending_exit is not None:
            semantic, swallowed_text = self.pending_exit
            frame[1] = semantic  # the swallowed frame, played with its own semantic code
            self.restored_text = swallowed_text
            self.pending_exit = None
        return frame

    # ---- many columns in one forward -------------------------------------------------------

    def prefill_forced(self, steps: Sequence[ForcedStep], max_columns: int | None = None
                       ) -> int:
        """Fully forced steps with `step`'s bookkeeping, their input columns forwarded in
        one pass (in pieces of `max_columns` when given). Returns the columns forwarded."""
        columns: list[np.ndarray] = []
        for forced in steps:
            prepared = self._prepare(forced.user, forced.agent, forced.text)
            if prepared is None:
                continue
            input_column, target_column = prepared
            if not self.provided[:, target_column].all():
                raise ValueError("a forced step must give every row")
            columns.append(self.ring[:, input_column].copy())
            self.provided[:, input_column] = False
            self.offset += 1
        if columns:
            sequence = np.stack(columns, axis=1)  # [17, N]
            size = max_columns or sequence.shape[1]
            for start in range(0, sequence.shape[1], size):
                out, _ = self._forward(sequence[:, start : start + size])
                mx.eval(out, *self.stream.arrays())
        return len(columns)

    def can_inject_block(self) -> bool:
        """A block needs a pending column that is a real frame (the first frame out exists)."""
        return self.offset >= self.max_delay + 2

    def inject_block(self, block: np.ndarray) -> int:
        """Read a span block [17, n] (text ids in row 0, placeholder codes elsewhere) in ONE
        forward after the pending column. Returns n."""
        if not self.can_inject_block():
            raise RuntimeError("a block cannot go in before the first frame")
        block = np.asarray(block, dtype=np.int64)
        n = int(block.shape[-1])
        if n == 0:
            return 0
        pending = (self.offset - 1) % RING
        if self.pending_exit is None:
            self.pending_exit = (int(self.ring[1, pending]), int(self.ring[0, pending]))
        sequence = np.concatenate([self.ring[:, pending : pending + 1], block[:, : n - 1]],
                                  axis=1)  # [17, n]
        out, _ = self._forward(sequence)
        mx.eval(out, *self.stream.arrays())
        for j in range(max(0, n - RING), n):  # the ring's view of the newest block columns
            column = (self.offset + j) % RING
            self.ring[:, column] = block[:, j]
            self.provided[:, column] = False
        self.offset += n
        self.provided[:, self.offset % RING] = False
        return n
