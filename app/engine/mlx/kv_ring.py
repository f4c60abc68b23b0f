"""The temporal transformer's KV ring on MLX, with the torch ring's exact semantics.

moshi's `RingKVCache` keeps `capacity` slots and writes position p at slot p % capacity; a
query at position q attends to the keys at positions q - context < p <= q. The torch
engine widens the ring to context + K_max - 1 slots (engine/kv_ring.py), so a forward of
up to K_max positions never overwrites a key its own first queries still see. This ring
does the same: the attention window is the context, the storage is what the longest
forward needs, and the slots' positions are kept on the host (a few thousand ints), so the
mask costs nothing on the device.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np


class SharedMask:
    """One forward's mask, made by the first layer's ring and reused by the others: every
    layer's ring of a stream is written in step, so they hold the same positions (building
    it per layer cost ~28 us each, ~0.9 ms a frame for 32 layers on a 2-core x86 CPU)."""

    def __init__(self) -> None:
        self.end: int | None = None  # the ring's end the mask was made at
        self.mask: mx.array | None = None


class KVRing:
    def __init__(self, context: int, capacity: int) -> None:
        if capacity < context:
            raise ValueError(f"a ring of {capacity} slots cannot hold a context of {context}")
        self.context = context
        self.capacity = capacity
        self.keys: mx.array | None = None  # [B, H, capacity, D]
        self.values: mx.array | None = None
        self.positions = np.full(capacity, -1, dtype=np.int64)  # the position in each slot
        self.end = 0  # positions written so far: the next position

    def arrays(self) -> list[mx.array]:
        return [a for a in (self.keys, self.values) if a is not None]

    def _write(self, target: mx.array, new: mx.array, start: int) -> mx.array:
        count = new.shape[2]
        first = min(count, self.capacity - start)
        target[:, :, start : start + first, :] = new[:, :, :first, :]
        if first < count:  # wrapped: the rest goes to the ring's start
            target[:, :, : count - first, :] = new[:, :, first:, :]
        return target

    def update(self, keys: mx.array, values: mx.array, shared: SharedMask | None = None
               ) -> tuple[mx.array, mx.array, mx.array | None]:
        """Write keys/values [B, H, T, D] for the next T positions; return the keys and
        values to attend to and the boolean mask [T, slots] (None: every slot, every query).
        `shared`: this forward's mask, if another ring in step with this one made it."""
        count = keys.shape[2]
        # The newest key this write overwrites must be one the first query no longer sees.
        overwritten = self.end + count - 1 - self.capacity
        if overwritten >= 0 and overwritten > self.end - self.context:
            raise ValueError(f"a forward of {count} positions needs a ring of at least "
                             f"{self.context + count - 1} slots, this one has {self.capacity}")
        if self.keys is None or self.values is None:
            batch, heads, _, dim = keys.shape
            self.keys = mx.zeros((batch, heads, self.capacity, dim), dtype=keys.dtype)
            self.values = mx.zeros((batch, heads, self.capacity, dim), dtype=values.dtype)
        start = self.end % self.capacity
        self.keys = self._write(self.keys, keys, start)
        self.values = self._write(self.values, values, start)
        new_positions = self.end + np.arange(count)
        self.positions[new_positions % self.capacity] = new_positions
        self.end += count
        used = min(self.end, self.capacity)  # before the ring fills, only its first slots
        if shared is not None and shared.end == self.end:
            return self.keys[:, :, :used, :], self.values[:, :, :used, :], shared.mask
        slot_positions = self.positions[:used]
        delta = new_positions[:, None] - slot_positions[None, :]  # [T, used]
        visible = (slot_positions >= 0) & (delta >= 0) & (delta < self.context)
        mask = None if visible.all() else mx.array(visible)
        if shared is not None:
            shared.end, shared.mask = self.end, mask
        return self.keys[:, :, :used, :], self.values[:, :, :used, :], mask
