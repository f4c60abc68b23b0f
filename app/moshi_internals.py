"""The moshi internals ContextSpan relies on, each behind one small named function.

moshi keeps several things the engine, the loaders and the training need without a public
accessor: a streaming module's state, the KV rings inside its attention layers, the initial
token column, its delay helper, Moshi 7B's configuration dict, its CUDA-graph switch, the
codebooks' lazy initialisation. Everything in `app/` reaches them through this module, so
an upgrade of moshi is read in one file, against its source. The accessors were read
against moshi 0.2.13 (pinned in pyproject.toml): on any other version this module refuses
to load, with the reason, instead of failing later inside a forward pass or, worse, running
with a state it misreads.

The one contract that cannot live here is a subclass's: the forcing generator is a moshi
`StreamingModule` and so implements its `_init_streaming_state` hook itself.

This is a base-layer module (it imports nothing from `app`), so `checkpoints/` can use it
as well as `engine/` and `training/`.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any, Protocol, TypeVar, cast

import moshi
import torch
from moshi.models import LMModel, loaders
from moshi.models.lm_utils import _delay_sequence
from moshi.modules import transformer as moshi_transformer
from moshi.modules.streaming import State, StreamingModule
from moshi.modules.transformer import RingKVCache, StreamingMultiheadAttention, _MHAState
from moshi.quantization.core_vq import EuclideanCodebook
from moshi.utils import compile as moshi_compile

READ_AGAINST = "0.2.13"  # the moshi version whose source these accessors were read from


class MoshiVersionError(RuntimeError):
    """The installed moshi is not the version whose internals this module was written for."""


def check_moshi_version(installed: str) -> None:
    """Raise unless `installed` is the version the accessors below were read against."""
    if installed != READ_AGAINST:
        raise MoshiVersionError(
            f"ContextSpan reaches moshi internals read against moshi {READ_AGAINST}, but "
            f"moshi {installed} is installed. Install moshi=={READ_AGAINST} (pyproject.toml), "
            f"or re-read each accessor in app/moshi_internals.py against the new source and "
            f"update READ_AGAINST.")


check_moshi_version(moshi.__version__)  # once, at import: nothing runs on a misread state


# ---- streaming state ---------------------------------------------------------------------

StateT = TypeVar("StateT", covariant=True)


class HasStreamingState(Protocol[StateT]):
    """A moshi StreamingModule (LMGen, LMModel, an attention layer, the forcing generator),
    seen only as the holder of its streaming state."""

    @property
    def _streaming_state(self) -> StateT | None: ...


def streaming_state(module: HasStreamingState[StateT]) -> StateT | None:
    """The module's streaming state object; None when it is not streaming. moshi has no
    public accessor (`get_streaming_state` copies out a dict of every submodule's)."""
    return module._streaming_state


# ---- the LM's frame layout -----------------------------------------------------------------


def initial_tokens(lm: LMModel) -> torch.Tensor:
    """The column the model reads before its first frame, [1, 17, 1] long, on its device."""
    return lm._get_initial_token()


def delay_sequence(delays: Sequence[int], codes: torch.Tensor,
                   padding: torch.Tensor) -> torch.Tensor:
    """moshi's stream delays applied to codes [B, K, T]: stream k moves right by delays[k],
    its first delays[k] columns taken from padding [B, K, 1]. Returns [B, K, T]."""
    return _delay_sequence(list(delays), codes, padding)


def moshi_7b_config() -> dict[str, Any]:
    """A copy of moshi's own Moshi 7B LM configuration (what `get_moshi_lm` builds when a
    checkpoint ships no config.json)."""
    return copy.deepcopy(loaders._lm_kwargs)


def moshi_mimi_config() -> dict[str, Any]:
    """A copy of moshi's own Mimi configuration (what `get_mimi` builds without one)."""
    return copy.deepcopy(loaders._mimi_config)


# ---- KV rings of the temporal transformer's attention layers -------------------------------


def kv_ring(layer: StreamingMultiheadAttention) -> RingKVCache | None:
    """The layer's KV ring; None when it is not streaming (or keeps no ring)."""
    state = streaming_state(layer)
    return None if state is None else state.kv_cache


def kv_rings(lm: LMModel) -> list[RingKVCache]:
    """The KV rings of every attention layer of the temporal transformer, in module order."""
    rings = (kv_ring(m) for m in lm.transformer.modules()
             if isinstance(m, StreamingMultiheadAttention))
    return [ring for ring in rings if ring is not None]


def ring_capacity(ring: RingKVCache) -> int:
    """How many positions the ring stores."""
    return int(ring.capacity)


def ring_end(ring: RingKVCache) -> int:
    """Positions written into the ring so far (the furthest batch row)."""
    return int(ring.end_offset.max())


def widen_kv_ring(layer: StreamingMultiheadAttention, capacity: int) -> None:
    """Give the streaming layer an empty ring of `capacity` positions, of the same batch,
    heads, head size, dtype, device and exec-mask behaviour as the one it replaces."""
    state = streaming_state(layer)
    if state is None or state.kv_cache is None:
        raise RuntimeError("the attention layer is not streaming")
    ring = state.kv_cache
    _, batch, heads, _, dim_per_head = ring.cache.shape  # [2, B, H, capacity, D]
    state.kv_cache = RingKVCache(
        batch,
        heads,
        dim_per_head,
        capacity,
        respect_exec_mask=ring.respect_exec_mask,
        device=ring.cache.device,
        dtype=ring.cache.dtype,
    )


class _QuantizedProjectionAttention(StreamingMultiheadAttention):
    """A self-attention layer whose in-projection is a quantized layer that computes in the
    model's dtype (app/engine/int4_linear.py, fp8_linear.py): moshi knows one quantized
    linear, its QLinear, whose products are float16, and so gives such a layer's KV ring
    float16; this one's ring is in `kv_dtype`, the dtype the projection writes into it.
    Otherwise moshi's own state (`_init_streaming_state`, moshi 0.2.13
    moshi/modules/transformer.py L446-483, self-attention branch), made here rather than made
    and replaced: the depformer makes its states anew at every step, and each ring costs a
    fill."""

    kv_dtype: torch.dtype

    def _init_streaming_state(self, batch_size: int) -> _MHAState:
        device = next(self.in_projs[0].parameters()).device
        if self.context is not None:
            capacity = self.context
        elif self.weights_per_step:
            capacity = self.weights_per_step
        else:
            raise RuntimeError("Cannot create a streaming KVCache without a context to "
                               "estimate capacity.")
        ring = RingKVCache(batch_size, self.num_heads // self.kv_repeat,
                           self.embed_dim // self.num_heads, capacity,
                           respect_exec_mask=not self.weights_per_step, device=device,
                           dtype=self.kv_dtype)
        return _MHAState(batch_size, device, ring,
                         offset=torch.zeros(batch_size, device=device, dtype=torch.long),
                         offset_cpu=0)


def keep_kv_dtype(attention: StreamingMultiheadAttention, dtype: torch.dtype) -> None:
    """Keys and values of `attention` (a self-attention whose in-projection is a QLinear
    subclass computing in `dtype`) in `dtype`, not moshi's float16. Before streaming."""
    if attention.cross_attention:
        raise ValueError("only self-attention layers keep a KV ring")
    attention.__class__ = _QuantizedProjectionAttention
    cast(_QuantizedProjectionAttention, attention).kv_dtype = dtype


def new_kv_ring(layer: StreamingMultiheadAttention, batch_size: int) -> RingKVCache:
    """The KV ring moshi gives the self-attention `layer` when it starts streaming at
    `batch_size` (its capacity, heads, dtype and device: moshi's own choice, quantized
    projections included), made on its own, the layer left as it is."""
    if layer.cross_attention:
        raise ValueError("only self-attention layers keep a KV ring")
    ring = layer._init_streaming_state(batch_size).kv_cache
    assert ring is not None
    return ring


def copy_ring(ring: RingKVCache) -> tuple[torch.Tensor, torch.Tensor]:
    """A copy of what the ring holds: (keys and values [2, B, H, capacity, D], end offsets)."""
    return ring.cache.clone(), ring.end_offset.clone()


def restore_ring(ring: RingKVCache, saved: tuple[torch.Tensor, torch.Tensor]) -> None:
    """Write a `copy_ring` copy back IN PLACE: a captured CUDA graph holds the ring's
    tensors at their addresses."""
    cache, end_offset = saved
    ring.cache.copy_(cache)
    ring.end_offset.copy_(end_offset)


def rewind_positions(transformer: torch.nn.Module, count: int) -> None:
    """Take back the last `count` positions a streaming forward wrote (padding): the
    attention layers' offsets and KV rings' end offsets, the layers' and the transformer's
    offsets, IN PLACE (a captured CUDA graph holds these tensors). Rows the exec mask kept
    out of that forward did not advance and are not rewound. The keys written stay in the
    ring, where the rewound offsets make the next positions overwrite them."""
    for module in transformer.modules():
        state = getattr(module, "_streaming_state", None)
        if state is None:
            continue
        if isinstance(state, moshi_transformer._MHAState):
            if module.cross_attention:
                continue
            state.offset[:] = torch.where(state.exec_mask, state.offset - count, state.offset)
            state.offset_cpu -= count
            ring = state.kv_cache
            if ring is not None:
                if ring.respect_exec_mask:
                    ring.end_offset[:] = torch.where(state.exec_mask, ring.end_offset - count,
                                                     ring.end_offset)
                else:
                    ring.end_offset.sub_(count)
        elif isinstance(state, moshi_transformer._TransformerState):
            state.offsets[:] = torch.where(state.exec_mask, state.offsets - count,
                                           state.offsets)
        elif isinstance(state, moshi_transformer._LayerState):
            state.offset_cpu -= count


# ---- one row's state, in a batch-1 copy shared by every row's reads -------------------------
#
# moshi's streaming states keep their per-row tensors with the batch first (offsets [B], the
# KV ring's end offsets [B]; the ring itself [2, B, H, capacity, D]) and update them in
# place. A read for one conversation (a span, a block, its start) runs at batch 1, never B
# rows of it: it runs on a batch-1 copy of the state, into which the row is loaded before
# and from which what the read wrote is stored back after. The copy is ONE for every row,
# its tensors always at the same addresses, so the CUDA graph of a read of each padded size
# is captured once for all rows (a view of each row would need a graph per row and size:
# 672 graphs at 48 rows on the H200, which ran out of memory).


class RowScratch:
    """A batch-1 copy of `module`'s streaming state (module streaming at batch B) that
    reads of any one row run on (`holding`)."""

    def __init__(self, module: StreamingModule[Any]) -> None:
        batch = module.get_streaming_state()
        if batch.get("") is None:
            raise RuntimeError("a row scratch needs the module in streaming mode")
        self.batch_size = int(batch[""].batch_size)
        self._module = module
        self._batch: dict[str, Any] = batch
        self._copy: dict[str, Any] = {
            name: None if state is None else _state_copy(state) for name, state in batch.items()}
        # (the batch's tensor, the copy's) for every per-row tensor but the rings' storage
        self._pairs: list[tuple[torch.Tensor, torch.Tensor]] = []
        self._rings: list[tuple[RingKVCache, RingKVCache]] = []
        for name, state in batch.items():
            if state is None:
                continue
            copy_state = self._copy[name]
            for f in dataclasses.fields(state):
                if not f.init or f.name in ("batch_size", "device"):
                    continue
                value, mine = getattr(state, f.name), getattr(copy_state, f.name)
                if isinstance(value, RingKVCache):
                    if not value.respect_exec_mask:  # one end offset for every row
                        raise RuntimeError(f"{name}: a KV ring shared by every row cannot "
                                           "be read for one row")
                    self._rings.append((value, mine))
                    self._pairs.append((value.end_offset, mine.end_offset))
                elif _per_row(value, self.batch_size):
                    self._pairs.append((value, mine))
        self.row: int | None = None  # the row loaded while `holding`

    def nbytes(self) -> int:
        """Device memory the copy holds (its rings, for the most part)."""
        return sum(ring.cache.numel() * ring.cache.element_size() for _b, ring in self._rings)

    @contextmanager
    def holding(self, row: int, positions: int) -> Iterator[None]:
        """While open, `module` streams row `row` alone, in the copy; on leaving, the
        state the forwards advanced and the `positions` KV slots they wrote last are
        stored back into the row (padding a graphed read wrote and rewound stays out)."""
        if not 0 <= row < self.batch_size:
            raise IndexError(f"row {row} of a batch of {self.batch_size}")
        with torch.no_grad():
            for big, mine in self._pairs:
                mine.copy_(big[row : row + 1])
            starts = []
            for big_ring, ring in self._rings:
                ring.cache.copy_(big_ring.cache[:, row : row + 1])
                starts.append(ring.end_offset.clone())
        self._module.set_streaming_state(self._copy)
        self.row = row
        try:
            yield
        finally:
            self.row = None
            self._module.set_streaming_state(self._batch)
            with torch.no_grad():
                for big, mine in self._pairs:
                    big[row : row + 1].copy_(mine)
                for (big_ring, ring), start in zip(self._rings, starts, strict=True):
                    _store_written(big_ring, ring, row, start, positions)


def _per_row(value: object, batch: int) -> bool:
    return isinstance(value, torch.Tensor) and value.dim() > 0 and value.shape[0] == batch


def _state_copy(state: State) -> State:
    """A batch-1 state with tensors of its own (row 0's values), exec mask all ones."""
    batch = state.batch_size
    changes: dict[str, Any] = {"batch_size": 1}
    for f in dataclasses.fields(state):
        if not f.init or f.name in ("batch_size", "device"):
            continue
        value = getattr(state, f.name)
        if isinstance(value, RingKVCache):
            ring = object.__new__(RingKVCache)  # moshi builds rings from sizes: fill one here
            ring.capacity = value.capacity
            ring.respect_exec_mask = value.respect_exec_mask
            ring.cache = value.cache[:, :1].clone()  # [2, 1, H, capacity, D]
            ring.end_offset = value.end_offset[:1].clone()
            changes[f.name] = ring
        elif _per_row(value, batch):
            changes[f.name] = value[:1].clone()
    return dataclasses.replace(state, **changes)  # exec_mask: a fresh ones(1)


def _store_written(big: RingKVCache, ring: RingKVCache, row: int, start: torch.Tensor,
                   positions: int) -> None:
    """The KV slots of the copy's last `positions` writes (from `start`) into row `row`."""
    capacity = int(ring.capacity)
    if positions >= capacity:
        big.cache[:, row : row + 1].copy_(ring.cache)
        return
    if positions <= 0:
        return
    slots = (start + torch.arange(positions, device=start.device)) % capacity  # [positions]
    big.cache[:, row].index_copy_(2, slots, ring.cache[:, 0].index_select(2, slots))


def unstreamed_copy(module: torch.nn.Module) -> Any:
    """A deep copy of `module` that does not stream, whatever the original is doing: every
    streaming state (another thread may be updating it in place) is left out of the copy."""
    leave_out: dict[int, Any] = {}
    for sub in module.modules():
        state = getattr(sub, "_streaming_state", None)
        if isinstance(sub, StreamingModule) and state is not None:
            leave_out[id(state)] = None  # deepcopy's memo: this object copies as None
    return copy.deepcopy(module, leave_out)


def streaming_state_bytes(module: torch.nn.Module) -> int:
    """Device memory the module's streaming states hold (tensors and KV rings)."""
    total = 0
    for sub in module.modules():
        state = getattr(sub, "_streaming_state", None)
        if not isinstance(sub, StreamingModule) or state is None:
            continue
        for value in vars(state).values():
            tensors = [value.cache, value.end_offset] if isinstance(value, RingKVCache) \
                else [value] if isinstance(value, torch.Tensor) else []
            total += sum(t.numel() * t.element_size() for t in tensors)
    return total


# ---- CUDA graphs and torch.compile -----------------------------------------------------------


def cuda_graphs_enabled() -> bool:
    """moshi's own switch: off under NO_CUDA_GRAPH=1 or inside `no_cuda_graph()`."""
    return moshi_compile._is_cuda_graph_enabled()


def graph_captured(graphed: moshi_compile.CUDAGraphed) -> bool:
    """Whether the CUDAGraphed function has captured its graph (on its second call)."""
    return graphed._graph is not None


def as_in_moshis_layers(device: torch.device) -> AbstractContextManager[None]:
    """What a moshi transformer layer's forward sets around itself: off a GPU, moshi's own
    torch.compile of its norms, rotary and gating is off (a no-op under NO_TORCH_COMPILE,
    the app's default, but not where moshi was imported before `app`, as in some tests).
    Code running a layer's modules outside its forward (app/engine/temporal_step.py,
    depformer_step.py) sets it too, to compute as the layer does."""
    return moshi_compile.no_compile() if device.type != "cuda" else nullcontext()


def torch_compile_enabled() -> bool:
    """Whether moshi wrapped its hot functions in torch.compile (decided at its import,
    by NO_TORCH_COMPILE)."""
    return hasattr(moshi_transformer._rms_norm, "__wrapped__")


# ---- Mimi's codebooks ------------------------------------------------------------------------


@contextmanager
def capturing_codebook_inputs() -> Iterator[dict[int, torch.Tensor]]:
    """While open, the first input [N, D] each EuclideanCodebook quantizes, by id(codebook).

    moshi quantizes in a private method; it is wrapped for the duration and restored after.
    """
    seen: dict[int, torch.Tensor] = {}
    original = EuclideanCodebook._quantize

    def capture(self: EuclideanCodebook, x: torch.Tensor) -> torch.Tensor:
        seen.setdefault(id(self), x.detach().clone())  # [N, D]
        return original(self, x)

    EuclideanCodebook._quantize = capture  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        EuclideanCodebook._quantize = original  # type: ignore[method-assign]


def mark_codebook_initialised(codebook: EuclideanCodebook) -> None:
    """Tell a codebook whose `embedding_sum` was written by hand that it is initialised
    (no k-means on first use), and drop its cached embedding so the next read recomputes it."""
    codebook._initialized.fill_(1.0)
    # moshi declares the buffer a Tensor, but it is None until the codebook next computes it.
    codebook._embedding = None  # type: ignore[assignment]
