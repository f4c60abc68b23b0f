"""The memory plan's count of a checkpoint (built on the meta device, no weights read) is
what the real loader puts in memory: every parameter, and every slot of the KV rings once
the engine has widened them for its longest chunk."""

from __future__ import annotations

import pytest
import torch
from moshi.modules.transformer import StreamingMultiheadAttention

from app.checkpoints.catalog import get_manifest
from app.engine.kv_ring import widen_attention_rings
from app.plan.footprint import checkpoint_shape, max_chunk_of


def ring_values(module: torch.nn.Module) -> int:
    total = 0
    for attention in module.modules():
        state = getattr(attention, "_streaming_state", None)
        if isinstance(attention, StreamingMultiheadAttention) and state is not None:
            total += state.kv_cache.cache.numel() if state.kv_cache is not None else 0
    return total


@pytest.mark.parametrize("model_id", ["tiny", "tiny-cs"])
def test_the_count_matches_the_loaded_checkpoint(model_id, request):
    checkpoint = request.getfixturevalue(
        "tiny_checkpoint" if model_id == "tiny" else "tiny_cs_checkpoint")
    manifest = get_manifest(model_id)
    shape = checkpoint_shape(manifest, checkpoint.folder)
    lm, mimi = checkpoint.lm, checkpoint.mimi
    assert shape.linear_params + shape.other_params == sum(p.numel() for p in lm.parameters())
    linear = sum(m.weight.numel() for m in lm.modules() if isinstance(m, torch.nn.Linear))
    assert shape.linear_params == linear > 0
    assert shape.codec_params == sum(p.numel() for p in mimi.parameters())
    with lm.streaming(1):
        widen_attention_rings(lm, max_chunk_of(manifest))
        temporal = ring_values(lm)
    with lm.depformer.streaming(1):  # detached: moshi streams it anew for every step
        depformer = ring_values(lm.depformer)
    assert shape.cache_values == temporal + depformer
    assert depformer > 0
    with mimi.streaming(1):
        assert shape.codec_cache_values == ring_values(mimi)


def test_a_checkpoint_not_on_disk_is_counted_from_its_architecture(tmp_path):
    """Context Spanning 7B before its download: PersonaPlex's 7B with dep_q 16."""
    shape = checkpoint_shape(get_manifest("context-spanning-7b"), tmp_path / "absent")
    assert 8.3e9 < shape.linear_params + shape.other_params < 8.45e9
    # 32 layers x (K and V) x 4096 x (context 3000 + the manifest's longest block, 600
    # tokens, - 1), plus the depformer's small rings.
    temporal = 32 * 2 * 4096 * (3000 + 600 - 1)
    assert temporal <= shape.cache_values < temporal * 1.01
