"""The temporal step with what every layer rebuilt built once (app/engine/temporal_step.py) is
moshi's forward_text bit for bit: the same output and text logits, the same state after it (every KV
ring's keys, values and end offset, every offset), step after step on tiny, tiny-cs and the
7B's layers at a small width in bf16; for one row and three rows whose exec mask changes
every step (the rows that do not step keep their state), one row reset midway, and rings
small enough to wrap."""

from __future__ import annotations

import copy

import pytest
import torch
from moshi.models import LMModel, loaders
from moshi.modules.transformer import StreamingMultiheadAttention

from app.bench.step_bench import SMALL_WIDTH
from app.checkpoints.architectures import personaplex_7b
from app.engine.temporal_step import TemporalStep, unsupported
from app.moshi_internals import kv_rings, streaming_state, widen_kv_ring

STEPS = 40
RING = 16  # slots: the rings wrap twice


def _small_rings(lm: LMModel) -> None:
    for module in lm.transformer.modules():
        if isinstance(module, StreamingMultiheadAttention):
            widen_kv_ring(module, RING)


@pytest.mark.parametrize("model", ["tiny", "tiny-cs", "7b-bf16"])
@pytest.mark.parametrize("rows", [1, 3])
def test_the_step_is_moshis_forward_text_bit_for_bit(model, rows, request):
    torch.manual_seed(0)
    if model == "7b-bf16":  # two of its 32 layers: each is the same code
        config = personaplex_7b() | SMALL_WIDTH | {"num_layers": 2}
        theirs = loaders.get_moshi_lm(None, lm_kwargs=config, device="cpu",
                                      dtype=torch.bfloat16).eval()
    else:
        theirs = request.getfixturevalue(f"{model.replace('-', '_')}_checkpoint").lm
    assert unsupported(theirs) is None
    ours_lm = copy.deepcopy(theirs)
    with torch.no_grad(), theirs.streaming(rows), ours_lm.streaming(rows):
        _small_rings(theirs)
        _small_rings(ours_lm)
        ours = TemporalStep(ours_lm)
        for step in range(STEPS):
            codes = torch.randint(0, 60, (rows, 17, 1))
            if rows > 1:
                stepping = torch.rand(rows) < 0.7
                theirs.set_exec_mask(stepping)
                ours_lm.set_exec_mask(stepping)
                if step == STEPS // 2:
                    reset = torch.tensor([False, True, False])
                    theirs.reset_streaming(reset)
                    ours_lm.reset_streaming(reset)
            out, text_logits = theirs.forward_text(codes)
            our_out, our_text_logits = ours(codes)
            assert torch.equal(our_out, out), f"output, step {step}"
            assert torch.equal(our_text_logits, text_logits), f"text logits, step {step}"
        for layer, (a, b) in enumerate(zip(kv_rings(theirs), kv_rings(ours_lm), strict=True)):
            assert torch.equal(a.end_offset, b.end_offset), layer
            assert torch.equal(a.cache, b.cache), layer
        theirs_state = streaming_state(theirs.transformer)
        ours_state = streaming_state(ours_lm.transformer)
        assert theirs_state is not None and ours_state is not None
        assert torch.equal(theirs_state.offsets, ours_state.offsets)
        for a, b in zip(theirs.transformer.modules(), ours_lm.transformer.modules(),
                        strict=True):
            if isinstance(a, StreamingMultiheadAttention):
                sa, sb = streaming_state(a), streaming_state(b)
                assert sa is not None and sb is not None
                assert torch.equal(sa.offset, sb.offset)
                assert sa.offset_cpu == sb.offset_cpu
