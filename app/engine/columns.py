"""The column bookkeeping of the speech model's generator, written once, for every framework
and every batch size: what each frame feeds the temporal transformer, and what it returns.

A column is the 17 rows of one position: row 0 the text, rows 1-8 the model's Mimi codes,
rows 9-16 the user's. Acoustic rows are delayed by one (`delays`). A book keeps, per
conversation row of the engine, a small ring of columns on the host (numpy) and the offset
of the next column; the framework seam (lm_runtime.py) only runs the columns it is given
through the LM. Two books, because the checkpoints were trained with two generators:

- `ForcingColumns`: PersonaPlex and its Context Spanning fine-tune (the reference's forked
  generator). A ring of 4 columns with a `provided` flag per cell; `offset` is the index of
  the next *target* column. A frame writes each given row k (the user's 8 always; the text
  and the model's rows when forced) into column offset + delay[k], marked provided, so the
  user frame lands in the target column. At offset 0 it only seeds column 0 with the
  initial tokens. Otherwise ONE temporal forward over column offset - 1 predicts column
  offset: the text is sampled (the provided value is what the depformer sees, if any), the
  depformer runs all `dep_q` steps teacher-forced where a value is provided, and sampled
  values are written only where nothing was provided (with dep_q 16 a missing user frame is
  model-sampled). The frame returned is column offset - 1's text and semantic code with
  column offset's acoustic codes: one frame behind the user frame just given. A span block
  is ONE forward over [pending column] + block[:n-1]; the newest block columns go into the
  ring and the offset advances by n; the first frame out after it carries the pending
  column's semantic code (the frame the block swallowed is still played) and its text is
  kept as `restored_text` for the transcript. A conversation start is a run of fully forced
  frames with the same bookkeeping, their input columns read in one forward.
- `StockColumns`: vanilla Moshi, moshi 0.2.13's `LMGen` (a ring of max_delay + 2 columns,
  no provided flags): the user frame goes into column offset + delay and column `offset`
  is fed in the same frame; the sampled text and model codes are written at offset + 1;
  the frame that is complete (offset - max_delay, undelayed) is returned. Spans are
  positions (text ids, the zero token elsewhere) read by the transformer alone: the book
  does not move.

Shapes: `ring` [B, 17, R] int64, `provided` [B, 17, R] bool, `offset` [B]; a frame's
`StepColumns` are [17] vectors for one row.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

UNGENERATED = -2  # moshi's "nothing here yet"
ZERO_TOKEN = -1  # embeds to an exact zero vector: an audio row a span position leaves empty
FORCING_RING = 4  # the input, the target, the target's delayed rows, one spare


@dataclass(frozen=True)
class ForcedStep:
    """One frame whose rows are all given: user [8], agent [8] codes and the text id."""

    user: tuple[int, ...]
    agent: tuple[int, ...]
    text: int


@dataclass(frozen=True)
class LmLayout:
    """The facts of the LM's columns the bookkeeping reads (from its config)."""

    delays: tuple[int, ...]  # [17]: each row's delay
    dep_q: int  # rows the depformer samples (8, or 16 with the user's)
    n_q: int  # audio rows (16)
    text_initial: int  # the text row's initial token (text_card)
    audio_initial: int  # the audio rows' initial token (card)

    @property
    def num_codebooks(self) -> int:
        return self.n_q + 1

    @property
    def max_delay(self) -> int:
        return max(self.delays)

    @property
    def per_side(self) -> int:
        return self.n_q // 2

    def initial_column(self) -> npt.NDArray[np.int64]:
        column = np.full(self.num_codebooks, self.audio_initial, dtype=np.int64)
        column[0] = self.text_initial
        return column


@dataclass(frozen=True)
class StepColumns:
    """What one row's frame gives the LM: the column it feeds, and the target column's
    given values (`provided`: which of them the sampling must keep)."""

    input: npt.NDArray[np.int64]  # [17]
    target: npt.NDArray[np.int64]  # [17]
    provided: npt.NDArray[np.bool_]  # [17]


class ColumnBook:
    """The per-row state both books share, and the interface the frame loop drives."""

    ring_size: int

    def __init__(self, layout: LmLayout, rows: int) -> None:
        self.layout = layout
        self.rows = rows
        self.delays = np.asarray(layout.delays, dtype=np.int64)
        self.initial = layout.initial_column()
        self.out_rows = np.arange(1 + layout.dep_q)
        self.ring = np.full((rows, layout.num_codebooks, self.ring_size), UNGENERATED, np.int64)
        self.provided = np.zeros(self.ring.shape, dtype=bool)
        self.offset = np.zeros(rows, dtype=np.int64)
        # After a block: the swallowed column's (semantic code, text), put back on the
        # next frame out; kept from the first of two adjacent blocks.
        self.pending_exit: list[tuple[int, int] | None] = [None] * rows
        self._restored: list[int | None] = [None] * rows
        self._steps: list[StepColumns | None] = [None] * rows  # prepared, not committed

    def reset(self, row: int) -> None:
        """The row starts a new conversation: an empty ring, offset 0."""
        self.ring[row] = UNGENERATED
        self.provided[row] = False
        self.offset[row] = 0
        self.pending_exit[row] = None
        self._restored[row] = None
        self._steps[row] = None

    def restored_text(self, row: int) -> int | None:
        """The text a block swallowed, for the row's frame just returned (or None)."""
        return self._restored[row]

    # ---- one frame ---------------------------------------------------------------------

    def prepare(self, row: int, user: Sequence[int] | npt.NDArray[np.integer[Any]],
                agent: Sequence[int] | npt.NDArray[np.integer[Any]] | None = None,
                text: int | None = None) -> StepColumns | None:
        """The row's frame: its user codes [8] (the model's codes [8] and text forced when
        given). None: nothing to run this frame (the ring is only seeded)."""
        raise NotImplementedError

    def commit(self, row: int, text: int, audio: npt.NDArray[np.integer[Any]]
               ) -> npt.NDArray[np.int64] | None:
        """The frame's samples (text id; dep_q codes) into the ring; the frame out
        [1 + dep_q] (text, the model's codes, then the user's with dep_q 16), or None while
        the delays fill."""
        raise NotImplementedError

    def _prepared(self, row: int) -> StepColumns:
        """The row's frame prepared and not committed yet (taken: it commits once)."""
        step = self._steps[row]
        if step is None:
            raise RuntimeError("commit without a prepared frame")
        self._steps[row] = None
        return step

    # ---- many columns in one forward (forcing checkpoints) ------------------------------

    def can_read_block(self, row: int) -> bool:
        return False

    def block(self, row: int, block: npt.NDArray[np.integer[Any]]) -> npt.NDArray[np.int64]:
        """The columns to read for a span block [17, n], its bookkeeping applied."""
        raise NotImplementedError(f"{type(self).__name__} takes spans as positions")

    def forced_start(self, row: int, steps: Sequence[ForcedStep]) -> npt.NDArray[np.int64]:
        """The input columns [17, N] of a conversation start's forced frames, their
        bookkeeping applied."""
        raise NotImplementedError(f"{type(self).__name__} cannot force a conversation start")

    def after_saved_voice(self, row: int, ring: npt.NDArray[Any], frames: int) -> None:
        raise NotImplementedError(f"{type(self).__name__} cannot replay a saved voice")


class ForcingColumns(ColumnBook):
    ring_size = FORCING_RING

    def __init__(self, layout: LmLayout, rows: int) -> None:
        super().__init__(layout, rows)
        per_side = layout.per_side
        self.agent_rows = np.arange(1, 1 + per_side)
        self.user_rows = np.arange(1 + per_side, layout.num_codebooks)

    def _write_rows(self, row: int, rows: npt.NDArray[np.integer[Any]],
                    values: Sequence[int] | npt.NDArray[np.integer[Any]]) -> None:
        columns = (self.offset[row] + self.delays[rows]) % FORCING_RING
        self.ring[row, rows, columns] = np.asarray(values, dtype=np.int64).reshape(-1)
        self.provided[row, rows, columns] = True

    def _seed(self, row: int, user: Sequence[int] | npt.NDArray[np.integer[Any]] | None,
              agent: Sequence[int] | npt.NDArray[np.integer[Any]] | None, text: int | None
              ) -> tuple[int, int] | None:
        """The reference's step preparation: (input column, target column), or None at
        offset 0, where only the initial column is written."""
        offset = int(self.offset[row])
        if user is not None:
            self._write_rows(row, self.user_rows, user)
        if agent is not None:
            self._write_rows(row, self.agent_rows, agent)
        if text is not None:
            column = (offset + int(self.delays[0])) % FORCING_RING
            self.ring[row, 0, column] = int(text)
            self.provided[row, 0, column] = True
        young = np.flatnonzero(offset <= self.delays)  # rows reading the initial token
        if young.size:
            column = offset % FORCING_RING
            self.ring[row, young, column] = self.initial[young]
            self.provided[row, young, column] = True
        if offset == 0:
            self.ring[row, :, 0] = self.initial
            self.offset[row] = 1
            return None
        return (offset - 1) % FORCING_RING, offset % FORCING_RING

    def prepare(self, row: int, user: Sequence[int] | npt.NDArray[np.integer[Any]],
                agent: Sequence[int] | npt.NDArray[np.integer[Any]] | None = None,
                text: int | None = None) -> StepColumns | None:
        seeded = self._seed(row, user, agent, text)
        if seeded is None:
            return None
        input_column, target_column = seeded
        step = StepColumns(self.ring[row, :, input_column].copy(),
                           self.ring[row, :, target_column].copy(),
                           self.provided[row, :, target_column].copy())
        self._steps[row] = step
        return step

    def commit(self, row: int, text: int, audio: npt.NDArray[np.integer[Any]]
               ) -> npt.NDArray[np.int64] | None:
        step = self._prepared(row)
        offset = int(self.offset[row])
        input_column, target_column = (offset - 1) % FORCING_RING, offset % FORCING_RING
        dep_q = self.layout.dep_q
        given, target = step.provided, step.target
        self.provided[row, :, input_column] = False
        self.ring[row, 0, target_column] = target[0] if given[0] else int(text)
        audio_rows = slice(1, 1 + dep_q)
        self.ring[row, audio_rows, target_column] = np.where(
            given[audio_rows], target[audio_rows], np.asarray(audio, dtype=np.int64))
        if offset <= self.layout.max_delay:
            self.offset[row] = offset + 1
            return None
        columns = (offset - self.layout.max_delay + self.delays[self.out_rows]) % FORCING_RING
        out = self.ring[row, self.out_rows, columns].copy()  # [1 + dep_q]
        self.offset[row] = offset + 1
        self._restored[row] = None
        pending = self.pending_exit[row]
        if pending is not None:
            semantic, swallowed = pending
            out[1] = semantic  # the swallowed frame, played with its own semantic code
            self._restored[row] = swallowed
            self.pending_exit[row] = None
        return out

    # ---- many columns in one forward -----------------------------------------------------

    def forced_start(self, row: int, steps: Sequence[ForcedStep]) -> npt.NDArray[np.int64]:
        columns: list[npt.NDArray[np.int64]] = []
        for forced in steps:
            seeded = self._seed(row, forced.user, forced.agent, forced.text)
            if seeded is None:
                continue
            input_column, target_column = seeded
            if not self.provided[row, :, target_column].all():
                raise ValueError("a forced step must give every row")
            columns.append(self.ring[row, :, input_column].copy())
            self.provided[row, :, input_column] = False
            self.offset[row] += 1
        if not columns:
            return np.zeros((self.layout.num_codebooks, 0), dtype=np.int64)
        return np.stack(columns, axis=1)  # [17, N]

    def can_read_block(self, row: int) -> bool:
        """A block needs a pending column that is a real frame (the first frame out exists)."""
        return int(self.offset[row]) >= self.layout.max_delay + 2

    def block(self, row: int, block: npt.NDArray[np.integer[Any]]) -> npt.NDArray[np.int64]:
        if not self.can_read_block(row):
            raise RuntimeError("a block cannot go in before the first frame")
        block = np.asarray(block, dtype=np.int64)
        n = int(block.shape[-1])
        offset = int(self.offset[row])
        pending = (offset - 1) % FORCING_RING
        if n == 0:
            return np.zeros((self.layout.num_codebooks, 0), dtype=np.int64)
        if self.pending_exit[row] is None:
            self.pending_exit[row] = (int(self.ring[row, 1, pending]),
                                      int(self.ring[row, 0, pending]))
        sequence = np.concatenate([self.ring[row, :, pending : pending + 1], block[:, : n - 1]],
                                  axis=1)  # [17, n]
        for j in range(max(0, n - FORCING_RING), n):  # the ring's view of the newest columns
            column = (offset + j) % FORCING_RING
            self.ring[row, :, column] = block[:, j]
            self.provided[row, :, column] = False
        self.offset[row] = offset + n
        self.provided[row, :, (offset + n) % FORCING_RING] = False
        return sequence

    def after_saved_voice(self, row: int, ring: npt.NDArray[Any], frames: int) -> None:
        """A PersonaPlex `.pt` voice's saved ring, after its N frames were replayed: as after
        the N forced steps the embeddings stand for (they follow the offset-0 seeding step),
        the last frame's rows stay given where its delays put them, so its acoustic codes in
        the next column are not resampled."""
        if int(self.offset[row]) != 0:
            raise RuntimeError("a saved voice prompt starts a conversation")
        ring = np.asarray(ring, dtype=np.int64).reshape(-1, *np.shape(ring)[-2:])
        if ring.shape[-1] != FORCING_RING or ring.shape[-2] != self.layout.num_codebooks:
            raise ValueError(f"a saved voice ring of shape {tuple(np.shape(ring))} does not "
                             f"fit this generator ([B, {self.layout.num_codebooks}, "
                             f"{FORCING_RING}])")
        self.ring[row] = ring[0]
        self.provided[row] = False
        for k, delay in enumerate(self.layout.delays):
            self.provided[row, k, (frames + delay) % FORCING_RING] = True
        self.offset[row] = frames + 1


class StockColumns(ColumnBook):
    def __init__(self, layout: LmLayout, rows: int) -> None:
        self.ring_size = layout.max_delay + 2
        super().__init__(layout, rows)
        self.user_rows = np.arange(1 + layout.dep_q, layout.num_codebooks)
        self._no_target = np.zeros(layout.num_codebooks, dtype=np.int64)

    def prepare(self, row: int, user: Sequence[int] | npt.NDArray[np.integer[Any]],
                agent: Sequence[int] | npt.NDArray[np.integer[Any]] | None = None,
                text: int | None = None) -> StepColumns | None:
        """`agent` (dep_q codes): the model's codes given instead of the depformer's
        (moshi's `depformer_replace_tokens`); the text cannot be forced."""
        if text is not None:
            raise ValueError("moshi's LMGen cannot force the model's text")
        size, offset = self.ring_size, int(self.offset[row])
        values = np.asarray(user, dtype=np.int64).reshape(-1)[: self.user_rows.size]
        if values.size < self.user_rows.size:
            raise ValueError(f"{self.user_rows.size} user codes needed, {values.size} given")
        self.ring[row, self.user_rows, (offset + self.delays[self.user_rows]) % size] = values
        column = self.ring[row, :, offset % size].copy()
        young = offset <= self.delays
        column[young] = self.initial[young]
        provided = np.zeros(self.layout.num_codebooks, dtype=bool)
        target = self._no_target.copy()
        if agent is not None:
            forced = np.asarray(agent, dtype=np.int64).reshape(-1)
            if forced.size != self.layout.dep_q:
                raise ValueError(f"{self.layout.dep_q} forced codes needed, {forced.size} given")
            target[1 : 1 + self.layout.dep_q] = forced
            provided[1 : 1 + self.layout.dep_q] = True
        step = StepColumns(column, target, provided)
        self._steps[row] = step
        return step

    def commit(self, row: int, text: int, audio: npt.NDArray[np.integer[Any]]
               ) -> npt.NDArray[np.int64] | None:
        step = self._prepared(row)
        dep_q, size = self.layout.dep_q, self.ring_size
        offset = int(self.offset[row]) + 1
        self.offset[row] = offset
        audio_rows = slice(1, 1 + dep_q)
        self.ring[row, 0, offset % size] = int(text)
        self.ring[row, audio_rows, offset % size] = np.where(
            step.provided[audio_rows], step.target[audio_rows], np.asarray(audio, np.int64))
        if offset <= self.layout.max_delay:
            return None
        columns = (offset - self.layout.max_delay + self.delays[self.out_rows]) % size
        return self.ring[row, self.out_rows, columns].copy()


def make_book(generator: str, layout: LmLayout, rows: int) -> ColumnBook:
    """The book of the generator a checkpoint was trained with (its manifest's `generator`)."""
    return ForcingColumns(layout, rows) if generator == "forcing" else StockColumns(layout, rows)
