"""What the two MLX generators share: the LM's stream facts, the ring sizing, and the torch
generators' streaming interface that the engine's thread drives.

`MlxLmGen` (vanilla Moshi) and `MlxForcingGenerator` (PersonaPlex, Context Spanning) differ
in their token bookkeeping (`_reset_bookkeeping`); the temporal stream, whose KV rings hold
the longest chunk or block exactly, is made the same way for both.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

from app.engine.mlx.lm import MlxLm
from app.engine.mlx.sampling import Sampling

UNGENERATED = -2  # a ring cell no step has written yet


class MlxGeneratorBase:
    def __init__(self, lm: MlxLm, sampling: Sampling, max_chunk: int = 1) -> None:
        """`max_chunk`: the longest span chunk or block, which the KV rings hold exactly."""
        self.lm = lm
        shape = lm.shape
        self.sampling = sampling
        self.delays = np.array(shape.delays, dtype=np.int64)  # [17]: each stream's delay
        self.max_delay = int(self.delays.max())
        self.dep_q = shape.dep_q
        self.num_codebooks = shape.num_codebooks
        self.initial = np.array(shape.initial_column(), dtype=np.int64)  # [17]
        self.max_chunk = max(1, max_chunk)
        self.reset()

    def reset(self) -> None:
        """An empty context: the start of a conversation."""
        self.stream = self.lm.new_stream(self.max_chunk)
        self.offset = 0
        self._reset_bookkeeping()

    def _reset_bookkeeping(self) -> None:
        """The generator's own rings and flags, emptied (called by `reset`)."""
        raise NotImplementedError

    @contextmanager
    def streaming(self, batch_size: int = 1) -> Iterator[None]:
        if batch_size != 1:
            raise ValueError("the MLX generator streams one conversation (batch 1)")
        self.reset()
        yield

    def reset_streaming(self) -> None:
        self.reset()
