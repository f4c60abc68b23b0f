"""The framework seam on MLX: `--device mlx`, and Apple Silicon's automatic choice.

The LM is the MLX one (lm.py), each row with its own temporal stream, whose KV rings hold
the longest read exactly (as the torch engine widens its rings). A frame is one forward of
the row's input column, the text sampled, then the depformer's dep_q steps teacher-forced
where a value is provided; a read is ONE forward of its columns through the row's stream.
MLX runs no graph capture and no compile here, so nothing is warmed up by size.

Mimi is the frame codec `EngineOptions.mimi` chooses (frame_codec.py): MLX's on Apple
Silicon, torch's on the CPU elsewhere; the MLX engine holds one conversation (its Mimi
streams one row), so `--slots` needs the torch engine.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext

import mlx.core as mx
import numpy as np
import numpy.typing as npt
import torch

from app.engine.columns import LmLayout, StepColumns
from app.engine.lm_runtime import GraphCount
from app.engine.mlx.frame_codec import FrameCodec as MlxFrameCodec
from app.engine.mlx.frame_codec import TorchFrameCodec
from app.engine.mlx.lm import MlxLm, TemporalStream
from app.engine.mlx.sampling import Sampling, sample


class MlxUnsupportedError(RuntimeError):
    """A checkpoint option the MLX engine does not run yet (the message says which)."""


def layout_of(lm: MlxLm) -> LmLayout:
    shape = lm.shape
    return LmLayout(tuple(shape.delays), shape.dep_q, shape.n_q, shape.text_initial_id,
                    shape.audio_initial_id)


class MlxRuntime:
    def __init__(self, lm: MlxLm, sampling: Sampling, seed_torch: bool = True) -> None:
        self.lm = lm
        self.sampling = sampling
        self.layout = layout_of(lm)
        self.context = lm.shape.context
        self.text_padding_id = lm.shape.text_padding_id
        self.device_label = "mlx"
        self._seed_torch = seed_torch  # the torch Mimi samples nothing, but keep it seeded
        self._streams: list[TemporalStream] = []
        self._max_read = 1

    @contextmanager
    def streaming(self, rows: int, max_read: int) -> Iterator[None]:
        self._max_read = max(1, max_read)
        self._streams = [self.lm.new_stream(self._max_read) for _ in range(rows)]
        try:
            yield
        finally:
            self._streams = []

    def reset_row(self, row: int) -> None:
        self._streams[row] = self.lm.new_stream(self._max_read)

    def _forward(self, row: int, columns: npt.NDArray[np.int64]) -> tuple[mx.array, mx.array]:
        """Columns [17, T] through the row's temporal stream in one call."""
        return self.lm.forward_text(mx.array(columns[None]), self._streams[row])

    def step(self, rows: Sequence[int], columns: Sequence[StepColumns]
             ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        s = self.sampling
        texts: list[int] = []
        codes: list[list[int]] = []
        for row, given in zip(rows, columns, strict=True):
            out, text_logits = self._forward(row, given.input[:, None])
            text = sample(text_logits[:, -1], s.greedy, s.temp_text, s.top_k_text)  # [1]
            previous = mx.array([int(given.target[0])]) if given.provided[0] else text
            depformer = self.lm.new_depformer_stream()
            sampled: list[mx.array] = []
            for index in range(self.layout.dep_q):
                logits = self.lm.forward_depformer(previous, out, depformer)
                token = sample(logits, s.greedy, s.temp, s.top_k)
                sampled.append(token)
                k = 1 + index
                previous = mx.array([int(given.target[k])]) if given.provided[k] else token
            mx.eval(text, *sampled, *self._streams[row].arrays())
            texts.append(int(text[0]))
            codes.append([int(token[0]) for token in sampled])
        return np.asarray(texts, dtype=np.int64), np.asarray(codes, dtype=np.int64)

    def _read(self, row: int, columns: npt.NDArray[np.int64]) -> mx.array:
        out, _text_logits = self._forward(row, np.asarray(columns, dtype=np.int64))
        mx.eval(out, *self._streams[row].arrays())
        return out

    def read(self, row: int, columns: npt.NDArray[np.int64]) -> None:
        if columns.shape[-1]:
            self._read(row, columns)

    def read_outputs(self, row: int, columns: npt.NDArray[np.int64]) -> npt.NDArray[np.float32]:
        return np.asarray(self._read(row, columns)[0].astype(mx.float32))

    def replay_embeddings(self, row: int, embeddings: object) -> None:
        raise MlxUnsupportedError("a saved PersonaPlex voice prompt (.pt embeddings) is not "
                                  "replayed on MLX yet: choose a voice recording")

    def sync(self) -> None:
        pass  # each MLX forward ends in mx.eval: its work is done when it returns

    def seed(self, seed: int) -> None:
        if self._seed_torch:
            torch.manual_seed(seed)  # Mimi's side, as the torch engine seeds
        mx.random.seed(seed)

    def graph_count(self) -> GraphCount:
        return GraphCount()  # MLX captures no graph


class MlxCodec:
    """The MLX engine's frame codec (one row) behind the seam's face."""

    def __init__(self, codec: MlxFrameCodec) -> None:
        self._codec = codec
        self.num_codebooks = codec.num_codebooks

    @contextmanager
    def streaming(self, rows: int) -> Iterator[None]:
        if rows != 1:
            raise MlxUnsupportedError("the MLX engine holds one conversation: --slots needs "
                                      "the torch engine")
        if isinstance(self._codec, TorchFrameCodec):
            with self._codec.mimi.streaming(1):
                yield
        else:
            yield

    def join(self, row: int) -> None:
        self._codec.reset()

    def encode(self, rows: Sequence[int], pcm: npt.NDArray[np.float32]) -> npt.NDArray[np.int64]:
        return np.asarray(self._codec.encode_frame(np.asarray(pcm[0], np.float32)),
                          dtype=np.int64)[None]

    def decode(self, rows: Sequence[int], codes: npt.NDArray[np.int64]) -> npt.NDArray[np.float32]:
        return np.asarray(self._codec.decode_frame(codes[0]), dtype=np.float32)[None]

    def unstreamed(self) -> AbstractContextManager[None]:
        if isinstance(self._codec, TorchFrameCodec):
            from app.mimi_codec import mimi_states_aside

            return mimi_states_aside(self._codec.mimi)
        return nullcontext()
