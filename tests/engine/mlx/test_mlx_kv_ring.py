"""The MLX KV ring keeps the torch ring's window (the last `context` positions, the query's
own included) and refuses a write that would overwrite a key its own queries still see."""

from __future__ import annotations

import numpy as np
import pytest

mx = pytest.importorskip("mlx.core", reason="mlx does not import here (pip install mlx[cpu])")

from app.engine.mlx.kv_ring import KVRing, SharedMask  # noqa: E402


def _write(ring: KVRing, count: int):
    keys = mx.zeros((1, 1, count, 2))
    return ring.update(keys, keys)


def test_each_query_sees_the_last_context_positions_only():
    ring = KVRing(context=4, capacity=6)
    _write(ring, 5)  # positions 0..4
    _, _, mask = _write(ring, 2)  # positions 5 and 6: the slots hold 6, 1, 2, 3, 4, 5
    assert mask is not None
    slots = ring.positions
    visible = np.array(mask)
    for row, query in enumerate((5, 6)):
        seen = sorted(int(p) for p in slots[visible[row]])
        assert seen == list(range(query - 3, query + 1))


def test_a_forward_that_would_lose_keys_its_queries_see_is_refused():
    ring = KVRing(context=4, capacity=6)  # holds forwards of up to 3 positions exactly
    _write(ring, 6)
    _write(ring, 3)
    with pytest.raises(ValueError, match="needs a ring of at least 7 slots"):
        _write(ring, 4)


def test_an_empty_ring_takes_a_first_forward_as_long_as_it_is():
    ring = KVRing(context=4, capacity=6)
    keys, _, mask = _write(ring, 6)  # a conversation's start: nothing is overwritten
    assert keys.shape[2] == 6 and mask is not None


def test_rings_in_step_share_one_mask_per_forward_and_it_is_each_ring_s_own():
    layers = [KVRing(context=4, capacity=6) for _ in range(3)]
    alone = KVRing(context=4, capacity=6)
    for count in (5, 2, 1, 3):
        shared = SharedMask()
        masks = [ring.update(mx.zeros((1, 1, count, 2)), mx.zeros((1, 1, count, 2)), shared)[2]
                 for ring in layers]
        _, _, own = _write(alone, count)
        assert all(mask is masks[0] for mask in masks)  # built once, by the first layer
        if own is None:
            assert masks[0] is None
        else:
            assert masks[0] is not None and np.array_equal(np.array(masks[0]), np.array(own))
