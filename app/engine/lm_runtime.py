"""The framework seam: what the one frame loop (local_engine.py) asks of a framework.

The loop, the column bookkeeping (columns.py) and the span injector are written once; a
framework implements these two small interfaces, as whisper's decoding runs over its
`Inference`: torch (torch_runtime.py, app/mimi_codec.py) and MLX (mlx/mlx_runtime.py). Every
array crossing the seam is a host numpy array, so the bookkeeping never touches a device.

Adding a framework: implement `LmRuntime` (run columns through the LM; sample a frame) and
`FrameCodec` (Mimi: encode and decode a frame per row), and add it to frameworks.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from app.engine.columns import LmLayout, StepColumns


@dataclass(frozen=True)
class GraphCount:
    """The CUDA graphs a runtime holds: they and their memory pools are made once for the
    engine, never per row (a framework without graphs: zeros)."""

    step: int = 0  # the batched step's (the temporal forward, the depformer)
    reads: int = 0  # one per padded read size, shared by every row
    scratch_bytes: int = 0  # the batch-1 copy of the state every row's reads run on

    @property
    def graphs(self) -> int:
        return self.step + self.reads


@dataclass(frozen=True)
class Sampling:
    """How a frame's tokens are chosen: greedy (argmax), or temperature and top-k, the
    text's and the codebooks' apart (temp <= 0 is greedy too, as moshi's)."""

    greedy: bool = False
    temp: float = 0.8
    temp_text: float = 0.7
    top_k: int = 250
    top_k_text: int = 25


class LmRuntime(Protocol):
    layout: LmLayout
    context: int  # positions in the context window (0: none)
    text_padding_id: int
    device_label: str  # what EngineReady and the status bar call the device

    def streaming(self, rows: int, max_read: int) -> AbstractContextManager[None]:
        """The LM streaming `rows` conversations, its KV rings holding a read of up to
        `max_read` positions exactly. Entered and left on the engine's thread."""
        ...

    def reset_row(self, row: int) -> None:
        """The row starts a new conversation: an empty context."""
        ...

    def step(self, rows: Sequence[int], columns: Sequence[StepColumns]
             ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """ONE temporal forward over each row's input column (the rows not named do not
        advance), then per row: the text sampled, and the depformer's dep_q codes, each step
        fed the target's provided value where there is one (teacher forcing), else its own
        sample, the first fed the provided text or the sampled one. Returns the sampled
        text [A] and codes [A, dep_q] (int64), provided values not substituted."""
        ...

    def read(self, row: int, columns: npt.NDArray[np.int64]) -> None:
        """Columns [17, n] through the temporal transformer for the row alone, in one
        forward (padded to a graphed size where that is faster); logits dropped."""
        ...

    def read_outputs(self, row: int, columns: npt.NDArray[np.int64]) -> npt.NDArray[np.float32]:
        """The same read, returning the transformer's outputs [n, dim] (float32): the
        injection bench compares one read of n positions with n reads of one."""
        ...

    def replay_embeddings(self, row: int, embeddings: object) -> None:
        """A PersonaPlex saved voice's input embeddings [N, ..., dim] through the temporal
        transformer, for the row alone."""
        ...

    def sync(self) -> None:
        """Wait for the device's queued work (timings measure the work, not its launch)."""
        ...

    def seed(self, seed: int) -> None: ...

    def graph_count(self) -> GraphCount:
        """The graphs (and pools) it holds now: after the warm-up, all it will hold."""
        ...


class FrameCodec(Protocol):
    num_codebooks: int  # Mimi codes per frame (8)

    def streaming(self, rows: int) -> AbstractContextManager[None]: ...

    def join(self, row: int) -> None:
        """The row starts a new stream."""
        ...

    def encode(self, rows: Sequence[int], pcm: npt.NDArray[np.float32]) -> npt.NDArray[np.int64]:
        """PCM [A, 1920] float32 of `rows` -> codes [A, 8] int64."""
        ...

    def decode(self, rows: Sequence[int], codes: npt.NDArray[np.int64]) -> npt.NDArray[np.float32]:
        """Codes [A, 8] of `rows` -> PCM [A, 1920] float32."""
        ...

    def unstreamed(self) -> AbstractContextManager[None]:
        """A context where the checkpoint's torch Mimi does not stream (a conversation
        start encodes its voice recording in one pass)."""
        ...
