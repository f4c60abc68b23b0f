"""Mimi on torch for a frame loop, per row: three ways, one face (the engine's FrameCodec,
app/engine/lm_runtime.py; the recogniser streams its own Mimi the same way).

- `StreamCodec` (one row): the checkpoint's Mimi streaming at batch 1, exactly the
  single-conversation engine's encode and decode.
- `BatchedMimi` (the default with several rows): Mimi streams at batch B like the LM. A
  tick encodes the frames of the rows that have one in ONE batched call and decodes the
  rows that have a frame out in another, with exec_mask (moshi's convolutions and
  transformers keep every other row's state as it was); a joining row is reset
  (reset_mask). Its codes equal a stream of its own; its PCM equals it to float rounding
  (the batched convolutions sum in another order), which is why there is
- `PerRowMimi`: one batch-1 stream per row, made fresh when the row joins and installed
  around that row's encode and decode (moshi's public `set_streaming_state`: a pointer
  swap), bit for bit the one-row engine's.
Any of them can take Mimi out of streaming for a moment (`unstreamed`), for a
non-streaming encode: a voice recording at a conversation's start.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager, nullcontext
from typing import Any

import numpy as np
import torch
from moshi.models import MimiModel

from app.frames import FRAME_SAMPLES


@contextmanager
def mimi_states_aside(mimi: MimiModel) -> Iterator[None]:
    """While open, Mimi does not stream (its streams kept aside, then put back)."""
    saved = mimi.get_streaming_state()
    mimi.set_streaming_state(dict.fromkeys(saved))
    try:
        yield
    finally:
        mimi.set_streaming_state(saved)


class _TorchMimi:
    def __init__(self, mimi: MimiModel) -> None:
        self.mimi = mimi
        self.num_codebooks = int(mimi.num_codebooks)
        self.device = next(mimi.parameters()).device
        self.rows = 0

    def _codes(self, codes: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(codes, dtype=np.int64)).to(self.device)


class StreamCodec(_TorchMimi):
    @contextmanager
    def streaming(self, rows: int) -> Iterator[None]:
        if rows != 1:
            raise ValueError("StreamCodec streams one row")
        self.rows = rows
        with self.mimi.streaming(1):
            yield

    def join(self, row: int) -> None:
        self.mimi.reset_streaming()

    @torch.no_grad()
    def encode(self, rows: Sequence[int], pcm: np.ndarray) -> np.ndarray:
        frame = torch.from_numpy(np.ascontiguousarray(pcm[0], np.float32)).to(self.device)
        return self.mimi.encode(frame[None, None])[:, :, 0].cpu().numpy()  # [1, 8]

    @torch.no_grad()
    def decode(self, rows: Sequence[int], codes: np.ndarray) -> np.ndarray:
        out = self.mimi.decode(self._codes(codes)[:, :, None])  # [1, 1, 1920]
        return out[:, 0].float().cpu().numpy()

    def unstreamed(self) -> AbstractContextManager[None]:
        return mimi_states_aside(self.mimi)


class BatchedMimi(_TorchMimi):
    @contextmanager
    def streaming(self, rows: int) -> Iterator[None]:
        self.rows = rows
        with self.mimi.streaming(rows):
            yield

    def _mask(self, rows: Sequence[int]) -> torch.Tensor:
        mask = torch.zeros(self.rows, dtype=torch.bool, device=self.device)
        mask[list(rows)] = True
        return mask

    def join(self, row: int) -> None:
        self.mimi.reset_streaming(self._mask([row]))

    @torch.no_grad()
    def encode(self, rows: Sequence[int], pcm: np.ndarray) -> np.ndarray:
        frames = torch.zeros((self.rows, 1, FRAME_SAMPLES), device=self.device)
        frames[list(rows), 0] = torch.from_numpy(np.asarray(pcm, np.float32)).to(self.device)
        self.mimi.set_exec_mask(self._mask(rows))
        return self.mimi.encode(frames)[list(rows), :, 0].cpu().numpy()  # [A, 8]

    @torch.no_grad()
    def decode(self, rows: Sequence[int], codes: np.ndarray) -> np.ndarray:
        batch = torch.zeros((self.rows, self.num_codebooks, 1), dtype=torch.long,
                            device=self.device)
        batch[list(rows), :, 0] = self._codes(codes)  # [B, 8, 1]
        self.mimi.set_exec_mask(self._mask(rows))
        return self.mimi.decode(batch)[list(rows), 0].float().cpu().numpy()  # [A, 1920]

    def unstreamed(self) -> AbstractContextManager[None]:
        return mimi_states_aside(self.mimi)


class PerRowMimi(_TorchMimi):
    def __init__(self, mimi: MimiModel) -> None:
        super().__init__(mimi)
        self._streams: list[dict[str, Any]] = []

    @contextmanager
    def streaming(self, rows: int) -> Iterator[None]:
        self.rows = rows
        self._streams = [{} for _ in range(rows)]
        with ExitStack() as stack:
            stack.callback(self._streams.clear)
            yield

    def join(self, row: int) -> None:
        with self.mimi.streaming(1):  # fresh batch-1 states, kept for the row
            self._streams[row] = self.mimi.get_streaming_state()

    @contextmanager
    def _stream(self, row: int) -> Iterator[MimiModel]:
        states = self._streams[row]
        self.mimi.set_streaming_state(states)
        try:
            yield self.mimi
        finally:
            self.mimi.set_streaming_state(dict.fromkeys(states))

    @torch.no_grad()
    def encode(self, rows: Sequence[int], pcm: np.ndarray) -> np.ndarray:
        codes = []
        for row, frame in zip(rows, np.asarray(pcm, np.float32), strict=True):
            with self._stream(row) as mimi:
                tensor = torch.from_numpy(np.ascontiguousarray(frame)).to(self.device)
                codes.append(mimi.encode(tensor[None, None])[0, :, 0])
        return torch.stack(codes).cpu().numpy()  # [A, 8]

    @torch.no_grad()
    def decode(self, rows: Sequence[int], codes: np.ndarray) -> np.ndarray:
        pcm = []
        for row, column in zip(rows, self._codes(codes), strict=True):
            with self._stream(row) as mimi:
                pcm.append(mimi.decode(column[None, :, None])[0, 0])
        return torch.stack(pcm).float().cpu().numpy()  # [A, 1920]

    def unstreamed(self) -> AbstractContextManager[None]:
        return nullcontext()  # Mimi streams only inside one row's encode or decode


def torch_codec(mimi: MimiModel, rows: int,
                batched: bool = True) -> StreamCodec | BatchedMimi | PerRowMimi:
    """The codec for an engine of `rows` rows (`batched` False: one stream per row)."""
    if rows == 1:
        return StreamCodec(mimi)
    return BatchedMimi(mimi) if batched else PerRowMimi(mimi)
