"""A span block's columns: the one definition shared by the engine and the training layout.

A checkpoint trained on span blocks (the Context Spanning release) reads a span as n columns
of the 17-row sequence, one per token id (its delimiters included): the id in the text row,
the model's silence codes in its 8 audio rows and the user-side tone's codes in the user's
8 rows. The columns are already in delayed coordinates: every column is the same except for
its text, so delays do not move anything inside a block.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from app.engine.conversation_start import Placeholders


def block_columns(ids: Sequence[int], placeholders: Placeholders, num_codebooks: int
                  ) -> npt.NDArray[np.int64]:
    """The block of `ids` as codes [17, n] (int64)."""
    agent, user = placeholders.agent, placeholders.user
    if 1 + len(agent) + len(user) != num_codebooks:
        raise ValueError(f"placeholders of {len(agent)} + {len(user)} codes do not fill "
                         f"{num_codebooks - 1} audio rows")
    column = np.asarray([0, *agent, *user], dtype=np.int64)
    block = np.repeat(column[:, None], len(ids), axis=1)  # [17, n]
    block[0] = np.asarray(list(ids), dtype=np.int64)
    return block
