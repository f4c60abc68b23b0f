"""Mimi for the slots, two ways: one batched stream with a row per slot, or one stream each.

`BatchedMimi` (the default): Mimi streams at batch B like the LM. A tick encodes the frames
of the slots that have one in ONE batched call and decodes the rows that have a frame out
in another, with exec_mask (moshi's convolutions and transformers keep every other row's
state as it was); a joining slot's row is reset (reset_mask). Its codes equal a stream of
its own; its PCM equals it to float rounding (the batched convolutions sum in another
order), which is why `PerSlotMimi` exists: one batch-1 stream per slot, made fresh when
the slot joins and installed around that slot's encode and decode (moshi's public
`set_streaming_state`: a pointer swap), bit for bit the single-conversation engine's.

Either way Mimi can be taken out of streaming for a moment (`unstreamed`), for a
non-streaming encode: a voice prompt at a slot's start.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from typing import Any, Protocol

import torch
from moshi.models import MimiModel

from app.frames import FRAME_SAMPLES


class SlotCodec(Protocol):
    def streaming(self, batch_size: int) -> ExitStack: ...

    def join(self, row: int) -> None:
        """The row starts a new stream."""

    def encode(self, rows: Sequence[int], pcm: torch.Tensor) -> torch.Tensor:
        """pcm [A, 1920] for `rows` -> codes [A, 8]."""

    def decode(self, rows: Sequence[int], codes: torch.Tensor) -> torch.Tensor:
        """codes [A, 8] for `rows` -> pcm [A, 1920]."""

    def unstreamed(self) -> Any:
        """A context where Mimi does not stream (its streams kept aside)."""


@contextmanager
def _states_aside(mimi: MimiModel) -> Iterator[None]:
    saved = mimi.get_streaming_state()
    mimi.set_streaming_state(dict.fromkeys(saved))
    try:
        yield
    finally:
        mimi.set_streaming_state(saved)


class BatchedMimi:
    def __init__(self, mimi: MimiModel) -> None:
        self._mimi = mimi
        self._batch = 0
        self._device = next(mimi.parameters()).device

    def streaming(self, batch_size: int) -> ExitStack:
        self._batch = batch_size
        return self._mimi.streaming(batch_size)

    def _mask(self, rows: Sequence[int]) -> torch.Tensor:
        mask = torch.zeros(self._batch, dtype=torch.bool, device=self._device)
        mask[list(rows)] = True
        return mask

    def join(self, row: int) -> None:
        self._mimi.reset_streaming(self._mask([row]))

    @torch.no_grad()
    def encode(self, rows: Sequence[int], pcm: torch.Tensor) -> torch.Tensor:
        frames = torch.zeros((self._batch, 1, FRAME_SAMPLES), device=self._device)
        frames[list(rows), 0] = pcm.to(self._device)  # [B, 1, 1920]
        self._mimi.set_exec_mask(self._mask(rows))
        return self._mimi.encode(frames)[list(rows), :, 0]  # [A, 8]

    @torch.no_grad()
    def decode(self, rows: Sequence[int], codes: torch.Tensor) -> torch.Tensor:
        batch = torch.zeros((self._batch, codes.shape[1], 1), dtype=torch.long,
                            device=self._device)
        batch[list(rows), :, 0] = codes.to(self._device)  # [B, 8, 1]
        self._mimi.set_exec_mask(self._mask(rows))
        return self._mimi.decode(batch)[list(rows), 0]  # [A, 1920]

    def unstreamed(self) -> Any:
        return _states_aside(self._mimi)


class PerSlotMimi:
    def __init__(self, mimi: MimiModel) -> None:
        self._mimi = mimi
        self._streams: list[dict[str, Any]] = []
        self._device = next(mimi.parameters()).device

    def streaming(self, batch_size: int) -> ExitStack:
        self._streams = [{} for _ in range(batch_size)]
        stack = ExitStack()
        stack.callback(self._streams.clear)
        return stack

    def join(self, row: int) -> None:
        with self._mimi.streaming(1):  # fresh batch-1 states, kept for the row
            self._streams[row] = self._mimi.get_streaming_state()

    @contextmanager
    def _stream(self, row: int) -> Iterator[MimiModel]:
        states = self._streams[row]
        self._mimi.set_streaming_state(states)
        try:
            yield self._mimi
        finally:
            self._mimi.set_streaming_state(dict.fromkeys(states))

    @torch.no_grad()
    def encode(self, rows: Sequence[int], pcm: torch.Tensor) -> torch.Tensor:
        codes = []
        for row, frame in zip(rows, pcm, strict=True):
            with self._stream(row) as mimi:
                codes.append(mimi.encode(frame.to(self._device)[None, None])[0, :, 0])
        return torch.stack(codes)  # [A, 8]

    @torch.no_grad()
    def decode(self, rows: Sequence[int], codes: torch.Tensor) -> torch.Tensor:
        pcm = []
        for row, column in zip(rows, codes, strict=True):
            with self._stream(row) as mimi:
                pcm.append(mimi.decode(column.to(self._device)[None, :, None])[0, 0])
        return torch.stack(pcm)  # [A, 1920]

    @contextmanager
    def unstreamed(self) -> Iterator[None]:
        yield  # Mimi streams only inside one slot's encode or decode
