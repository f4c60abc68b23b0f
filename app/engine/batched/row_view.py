"""A forward for ONE batch row of a module streaming at batch B, at batch 1.

moshi's streaming states keep their per-row tensors with the batch first (offsets [B], the
KV ring's end offsets [B]; the ring itself [2, B, H, capacity, D]) and update them in place.
So batch-1 states whose tensors are views of row r, installed for one forward, make that
forward read and advance row r alone: a span block or a conversation start for one
conversation costs n positions of batch 1, never B rows of n, and the other rows are not
touched. Read against moshi 0.2.13 (`get_streaming_state`/`set_streaming_state` are public;
the states are the dataclasses of moshi/modules/{streaming,transformer}.py).

The views are eager: on a GPU a captured CUDA graph of another shape must not replay them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from moshi.models import LMModel
from moshi.modules.streaming import State, StreamingModule
from moshi.modules.transformer import RingKVCache


def _row_ring(ring: RingKVCache, row: int) -> RingKVCache:
    view = object.__new__(RingKVCache)
    view.capacity = ring.capacity
    view.respect_exec_mask = ring.respect_exec_mask
    view.cache = ring.cache[:, row : row + 1]  # [2, 1, H, capacity, D], a view
    view.end_offset = ring.end_offset[row : row + 1] if ring.respect_exec_mask else ring.end_offset
    return view


def _row_state(state: State, row: int) -> State:
    batch = state.batch_size
    changes: dict[str, Any] = {"batch_size": 1}
    for f in dataclasses.fields(state):
        if not f.init or f.name in ("batch_size", "device"):
            continue
        value = getattr(state, f.name)
        if isinstance(value, RingKVCache):
            changes[f.name] = _row_ring(value, row)
        elif isinstance(value, torch.Tensor) and value.dim() > 0 and value.shape[0] == batch:
            changes[f.name] = value[row : row + 1]
    return dataclasses.replace(state, **changes)  # exec_mask: a fresh ones(1)


@contextmanager
def row_streaming(module: StreamingModule[Any], row: int) -> Iterator[None]:
    """While open, `module` (and its streaming submodules) streams batch row `row` alone."""
    saved = module.get_streaming_state()
    if saved.get("") is None:
        raise RuntimeError("row_streaming needs the module in streaming mode")
    batch = saved[""].batch_size
    if not 0 <= row < batch:
        raise IndexError(f"row {row} of a batch of {batch}")
    module.set_streaming_state(
        {name: None if state is None else _row_state(state, row) for name, state in saved.items()})
    try:
        yield
    finally:
        module.set_streaming_state(saved)


@torch.no_grad()
def prefill_row_positions(lm: LMModel, row: int, token_ids: Sequence[int]) -> None:
    """A span chunk as positions for one row: text ids in stream 0, the zero token (an
    exact zero embedding) in the 16 audio streams; only that row's transformer advances."""
    ids = torch.tensor(list(token_ids), dtype=torch.long, device=lm.device)
    codes = torch.full((1, lm.num_codebooks, ids.numel()), lm.zero_token_id,
                       dtype=torch.long, device=lm.device)  # [1, 17, K]
    codes[0, 0] = ids
    with row_streaming(lm, row):
        lm.forward_text(codes)
