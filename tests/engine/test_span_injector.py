"""Exactness is the contract: K positions in one pass == the same K positions one by one."""

from __future__ import annotations

import copy
import threading
from dataclasses import replace

import pytest
import torch
from moshi.models import LMGen

from app.engine.context_ledger import ContextLedger
from app.engine.events import SpanAccepted, SpanChunkInjected, SpanInjected
from app.engine.kv_ring import widen_attention_rings
from app.engine.position_forwards import PositionForwards, positions_codes
from app.engine.span_injector import SpanInjector
from app.engine.span_text import SpanTokenizer
from app.moshi_internals import streaming_state

TOL = 1e-4


def prefill(gen: LMGen, ids: list[int], forwards: PositionForwards | None = None
            ) -> torch.Tensor:
    """The span's positions as the engine reads them (positions_codes, ONE forward; padded
    to a graphed size through `forwards`): the transformer's output [1, K, dim]."""
    codes = positions_codes(gen.lm_model, ids)
    with torch.no_grad():
        if forwards is not None:
            return forwards(codes)
        return gen.lm_model.forward_text(codes)[0]


class _LmGenReader:
    """The injector's reader over moshi's LMGen: spans as positions."""

    def __init__(self, gen: LMGen) -> None:
        self.gen = gen

    def read_positions(self, token_ids) -> None:
        prefill(self.gen, list(token_ids))

    def can_read_block(self) -> bool:
        return False

    def read_block(self, token_ids) -> int:
        raise NotImplementedError

    def sync(self) -> None:
        pass


def _twin_generators(lm, widen_to: int | None, **lmgen_kwargs):
    """Two LMGens over identical copies of the model, streaming, rings widened."""
    twins = []
    for model in (lm, copy.deepcopy(lm)):
        gen = LMGen(model, use_sampling=False, **lmgen_kwargs)
        gen.streaming_forever(1)
        if widen_to:
            widen_attention_rings(model, widen_to)
        twins.append(gen)
    return twins


def _user_codes(frames: int, card: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, card, (1, 8, frames), generator=torch.Generator().manual_seed(seed))


def _span_ids(k: int, vocab: int, seed: int) -> list[int]:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(4, vocab, (k,), generator=generator).tolist()


def _ring_state(lm) -> list[torch.Tensor]:
    from moshi.modules.transformer import StreamingMultiheadAttention

    tensors = []
    for module in lm.transformer.modules():
        if isinstance(module, StreamingMultiheadAttention):
            state = streaming_state(module)
            tensors += [state.kv_cache.cache, state.kv_cache.end_offset, state.offset]
    return tensors


def _drive(gen_a, gen_b, user: torch.Tensor, frames: range) -> None:
    for f in frames:
        out_a = gen_a.step(user[:, :, f : f + 1])
        out_b = gen_b.step(user[:, :, f : f + 1])
        if out_a is not None:
            assert torch.equal(out_a, out_b), f"the twins diverged at frame {f}"


@pytest.mark.parametrize("k", [2, 16, 64])
def test_one_pass_equals_one_by_one_early_late_and_after_the_window_wrapped(tiny_checkpoint, k):
    lm = tiny_checkpoint.lm
    context = lm.context
    gen_a, gen_b = _twin_generators(lm, widen_to=64)
    moments = [3, context // 2, context + 40]  # the last one: after the window wrapped
    user = _user_codes(moments[-1] + 20, lm.card)
    previous = 0
    for n, moment in enumerate(moments):
        _drive(gen_a, gen_b, user, range(previous, moment))
        previous = moment
        ids = _span_ids(k, lm.text_card, seed=n)
        one_pass = prefill(gen_a, ids)
        one_by_one = torch.cat([prefill(gen_b, [i]) for i in ids], dim=1)
        assert one_pass.shape == one_by_one.shape == (1, k, lm.dim)
        assert (one_pass - one_by_one).abs().max().item() < TOL, f"at frame {moment}"
        for a, b in zip(_ring_state(gen_a.lm_model), _ring_state(gen_b.lm_model), strict=True):
            assert torch.allclose(a.float(), b.float(), atol=TOL, rtol=0)
    # The conversation goes on identically after the injections.
    _drive(gen_a, gen_b, user, range(previous, previous + 20))


def test_without_widened_rings_chunks_lose_keys_once_the_window_wrapped(tiny_checkpoint):
    """The trap the ring widening exists for: a chunk overwrites keys its own earlier
    queries still attend to. Proves the exactness test above can fail."""
    lm = tiny_checkpoint.lm
    gen_a, gen_b = _twin_generators(lm, widen_to=None)
    frames = lm.context + 40
    user = _user_codes(frames, lm.card)
    _drive(gen_a, gen_b, user, range(frames))
    ids = _span_ids(64, lm.text_card, seed=1)
    one_pass = prefill(gen_a, ids)
    one_by_one = torch.cat([prefill(gen_b, [i]) for i in ids], dim=1)
    assert (one_pass - one_by_one).abs().max().item() > 1e-2


@pytest.mark.parametrize("k", [5, 50])
def test_a_read_padded_to_a_graphed_size_equals_one_by_one_after_the_window_wrapped(
        tiny_checkpoint, k):
    """A GPU reads K positions as ONE forward padded to a graphed size (position_forwards.py)
    and rewinds the padding: outputs and the conversation after it equal K reads of one
    position, here on the CPU, with the ring widened for the padded size."""
    from app.engine.position_forwards import widest_forward

    lm = tiny_checkpoint.lm
    gen_a, gen_b = _twin_generators(lm, widen_to=None)
    widen_attention_rings(gen_a.lm_model, widest_forward(lm, k, padded=True))
    forwards = PositionForwards(gen_a.lm_model, padded=True)
    frames = lm.context + 40
    user = _user_codes(frames + 20, lm.card)
    _drive(gen_a, gen_b, user, range(frames))
    ids = _span_ids(k, lm.text_card, seed=3)
    padded = prefill(gen_a, ids, forwards)
    one_by_one = torch.cat([prefill(gen_b, [i]) for i in ids], dim=1)
    assert forwards.forward_count == 1 and padded.shape == one_by_one.shape == (1, k, lm.dim)
    assert (padded - one_by_one).abs().max().item() < TOL
    _drive(gen_a, gen_b, user, range(frames, frames + 20))


def test_a_padded_read_needs_the_ring_widened_for_its_padding(tiny_checkpoint):
    """Why the engine widens the rings for the padded size, not the span's: with room for
    50 positions only, the 14 padding positions of a 64-wide read overwrite keys that the
    window still holds once it has wrapped, and the conversation after it changes."""
    lm = tiny_checkpoint.lm
    gen_a, gen_b = _twin_generators(lm, widen_to=50)
    forwards = PositionForwards(gen_a.lm_model, padded=True)
    frames = lm.context + 40
    user = _user_codes(frames + 1, lm.card)
    _drive(gen_a, gen_b, user, range(frames))
    ids = _span_ids(50, lm.text_card, seed=3)
    prefill(gen_a, ids, forwards)
    prefill(gen_b, ids)
    step = user[:, :, frames : frames + 1]
    gen_a.step(step)
    gen_b.step(step)
    logits_a, logits_b = [], []
    for gen, out in ((gen_a, logits_a), (gen_b, logits_b)):
        transformer_out = prefill(gen, [4])
        out.append(transformer_out)
    assert (logits_a[0] - logits_b[0]).abs().max().item() > 1e-3


def test_injection_leaves_lmgen_frame_bookkeeping_alone(tiny_checkpoint):
    lm = tiny_checkpoint.lm
    gen = LMGen(lm, use_sampling=False)
    gen.streaming_forever(1)
    widen_attention_rings(lm, 32)
    user = _user_codes(10, lm.card)
    for f in range(10):
        gen.step(user[:, :, f : f + 1])
    state = streaming_state(gen)
    offsets, ring, offset_cpu = state.offsets.clone(), state.cache.clone(), state.offset_cpu
    transformer_offsets = streaming_state(lm.transformer).offsets.clone()
    prefill(gen, _span_ids(32, lm.text_card, seed=3))
    assert torch.equal(state.offsets, offsets)
    assert torch.equal(state.cache, ring)
    assert state.offset_cpu == offset_cpu
    # Only the transformer's positions advanced, by K.
    assert torch.equal(streaming_state(lm.transformer).offsets, transformer_offsets + 32)


def _injector(checkpoint, chunk_limit: int) -> tuple[SpanInjector, LMGen, ContextLedger]:
    lm = checkpoint.lm
    gen = LMGen(lm, use_sampling=False)
    gen.streaming_forever(1)
    widen_attention_rings(lm, chunk_limit)
    ledger = ContextLedger(lm.context)
    tokenizer = SpanTokenizer(checkpoint.tokenizer, checkpoint.manifest.span_wrapping, 128)
    injector = SpanInjector(_LmGenReader(gen), tokenizer, ledger, chunk_limit, blocks=False)
    return injector, gen, ledger


def test_a_long_span_is_split_across_consecutive_frames(tiny_checkpoint):
    injector, gen, ledger = _injector(tiny_checkpoint, chunk_limit=8)
    span_id = injector.submit("the weather in berlin today is good and the capital is canberra",
                              "search")
    user = _user_codes(20, tiny_checkpoint.lm.card)
    events = []
    for frame in range(20):
        events += injector.before_frame(frame)
        gen.step(user[:, :, frame : frame + 1])
        ledger.add_frames()
    accepted = [e for e in events if isinstance(e, SpanAccepted)]
    chunks = [e for e in events if isinstance(e, SpanChunkInjected)]
    done = [e for e in events if isinstance(e, SpanInjected)]
    assert len(accepted) == 1 and accepted[0].span_id == span_id
    total = accepted[0].tokens
    assert len(chunks) == -(-total // 8) > 1
    assert all(c.k == 8 for c in chunks[:-1]) and sum(c.k for c in chunks) == total
    assert [c.before_frame for c in chunks] == list(range(len(chunks)))  # one per frame
    assert done[0].positions == total and done[0].chunks == len(chunks)
    assert ledger.span_positions == total and ledger.frame_positions == 20
    assert not injector.has_pending()


def test_chunked_span_matches_the_same_span_fed_one_position_a_frame(tiny_checkpoint):
    """Splitting across frames is itself exact: chunks of 8 between frames equal
    one-position chunks (same frames in between, same positions)."""
    lm = tiny_checkpoint.lm
    # Its own modules, so its own streaming lock (a lock is not copied).
    twin = replace(tiny_checkpoint, lm=copy.deepcopy(lm), streaming=threading.Lock())
    inj_a, gen_a, _ = _injector(tiny_checkpoint, chunk_limit=8)
    inj_b, gen_b, _ = _injector(twin, chunk_limit=8)
    text = "hello the capital of australia is canberra"
    inj_a.submit(text, "test")
    ids = inj_a.span_tokenizer.encode(text).ids
    user = _user_codes(12, lm.card)
    cursor = 0
    for frame in range(12):
        landed = [e for e in inj_a.before_frame(frame) if isinstance(e, SpanChunkInjected)]
        k = landed[0].k if landed else 0
        for token in ids[cursor : cursor + k]:  # the same positions, one at a time
            prefill(gen_b, [token])
        cursor += k
        out_a = gen_a.step(user[:, :, frame : frame + 1])
        out_b = gen_b.step(user[:, :, frame : frame + 1])
        if out_a is not None:
            assert torch.equal(out_a, out_b)
    for a, b in zip(_ring_state(gen_a.lm_model), _ring_state(gen_b.lm_model), strict=True):
        assert torch.allclose(a.float(), b.float(), atol=TOL, rtol=0)


def test_spans_scheduled_for_a_later_frame_wait_for_it(tiny_checkpoint):
    injector, gen, _ = _injector(tiny_checkpoint, chunk_limit=256)
    injector.submit("later", "test", not_before_frame=5)
    landed = []
    user = _user_codes(8, tiny_checkpoint.lm.card)
    for frame in range(8):
        landed += [e.before_frame for e in injector.before_frame(frame)
                   if isinstance(e, SpanChunkInjected)]
        gen.step(user[:, :, frame : frame + 1])
    assert landed == [5]


def test_the_backlog_is_bounded_even_once_spans_wait_for_their_frame(tiny_checkpoint):
    """Spans move from the incoming queue to the injector's own waiting list between frames;
    the bound counts both, so a flood cannot queue up spans that land minutes late."""
    from app.engine.span_injector import SpanQueueFullError

    injector, gen, _ = _injector(tiny_checkpoint, chunk_limit=8)
    for i in range(SpanInjector.MAX_QUEUED_SPANS):
        injector.submit(f"span {i}", "flood", not_before_frame=10_000)
    injector.before_frame(0)  # they now wait in the injector's list, the queue is empty
    with pytest.raises(SpanQueueFullError, match=r"\(flood\) was dropped"):
        injector.submit("one too many", "flood")
    assert injector.pending_count() == SpanInjector.MAX_QUEUED_SPANS
