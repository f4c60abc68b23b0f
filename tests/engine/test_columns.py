"""The forcing generator's column bookkeeping (columns.py) on tiny-cs (dep_q 16), through the
engine's own step and reads: the user is heard, the batched prefix equals the stepwise one,
a block in one forward equals its columns one at a time (before and after the KV ring
wraps), and the frame a block swallows is still played."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from moshi.models import LMGen

from app.engine.columns import ForcedStep
from app.engine.conversation_start import placeholder_codes, plan_start
from app.engine.lm_runtime import Sampling
from app.engine.torch_runtime import TorchRuntime
from app.moshi_internals import kv_rings, ring_end
from tests.engine.driven import DrivenEngine as Twin

TOL = 1e-4
CLOSE = 13


def _assert_same_state(a: Twin, b: Twin) -> None:
    assert a.offset == b.offset
    assert np.array_equal(a.book.ring, b.book.ring)
    assert np.array_equal(a.book.provided, b.book.provided)
    for (ka, ea), (kb, eb) in zip(a.kv(), b.kv(), strict=True):
        assert ea == eb
        assert torch.allclose(ka, kb, atol=TOL), float((ka - kb).abs().max())


def _user_frames(card: int, count: int, seed: int) -> torch.Tensor:
    return torch.randint(0, card, (count, 8), generator=torch.Generator().manual_seed(seed))


def _prefix(ck, persona: str = "You are a wise and friendly teacher.") -> list[ForcedStep]:
    placeholders = placeholder_codes(ck.mimi, None, None)
    plan = plan_start(ck.manifest, ck.folder, ck.mimi, ck.tokenizer, placeholders,
                      ck.lm.text_padding_token_id, frozenset({4, 12, 13}), persona=persona,
                      user_name="Ada", user_city="Seoul")
    return list(plan.steps)


def _continue_equal(a: Twin, b: Twin, users: torch.Tensor) -> None:
    """The same live frames into both: identical frames out, text logits to TOL."""
    for user in users:
        ia, ib = len(a.logits), len(b.logits)
        out_a, out_b = a.step(user), b.step(user)
        assert np.array_equal(out_a, out_b)
        assert torch.allclose(a.logits[ia], b.logits[ib], atol=TOL)


def test_the_user_is_heard_with_a_16_codebook_depformer(tiny_cs_checkpoint):
    ck = tiny_cs_checkpoint
    a, b = Twin(ck), Twin(ck)
    prefix = _prefix(ck)
    a.forced(prefix)
    b.forced(prefix)
    users = _user_frames(ck.lm.card, 6, seed=3)
    for user in users[:5]:
        a.step(user)
        b.step(user)
    other = (users[5] + 7) % ck.lm.card  # a different user frame, same everything else
    out_a, out_b = a.step(users[5]), b.step(other)
    # The user frame lands in the target column: the model's rows of this frame are not
    # affected yet, the user's rows (teacher-forced) are.
    assert np.array_equal(out_a[:9], out_b[:9])
    assert int(out_a[9]) == int(users[4][0])  # frame 4's user code, one frame behind
    ia, ib = len(a.logits), len(b.logits)
    a.step(users[0])
    b.step(users[0])
    assert not torch.allclose(a.logits[ia], b.logits[ib])  # the next frame heard the user


def test_stock_lmgen_drops_the_user_with_a_16_codebook_depformer(tiny_cs_checkpoint):
    """Why the forcing generator exists: moshi 0.2.13's LMGen expects num_codebooks - dep_q
    - 1 = 0 user codebooks from a dep_q 16 model and slices the user's audio away."""
    ck = tiny_cs_checkpoint
    runs = []
    for shift in (0, 7):
        lm = copy.deepcopy(ck.lm)
        seen: list[torch.Tensor] = []
        original = lm.forward_text

        def recording(sequence, *args, _original=original, _seen=seen):
            out, text_logits = _original(sequence, *args)
            _seen.append(text_logits.clone())
            return out, text_logits

        lm.forward_text = recording
        gen = LMGen(lm, use_sampling=False)
        gen.streaming_forever(1)
        users = _user_frames(lm.card, 6, seed=3)
        users[3] = (users[3] + shift) % lm.card
        with torch.no_grad():
            for user in users:
                gen.step(user[None, :, None])
        runs.append(torch.cat(seen, dim=2))
    assert torch.equal(runs[0], runs[1])


def test_the_batched_prefix_equals_the_stepwise_prefix(tiny_cs_checkpoint):
    ck = tiny_cs_checkpoint
    prefix = _prefix(ck)
    assert len(prefix) > 40  # voice frames, silence, persona tokens, silence
    a, b = Twin(ck, widen=64), Twin(ck, widen=64)
    fed = a.prefill_forced(prefix)
    b.forced(prefix)
    assert fed == len(prefix) - 1  # the first forced step only seeds the ring
    assert len(a.logits) == 1 and len(b.logits) == len(prefix) - 1  # one forward vs many
    assert torch.allclose(a.logits[0], torch.cat(b.logits, dim=2), atol=TOL)
    _assert_same_state(a, b)
    _continue_equal(a, b, _user_frames(ck.lm.card, 6, seed=5))


@pytest.mark.parametrize("live_frames", [12, 400], ids=["early", "after-the-ring-wrapped"])
def test_a_block_in_one_forward_equals_its_columns_one_at_a_time(tiny_cs_checkpoint,
                                                                  live_frames: int):
    ck = tiny_cs_checkpoint
    ids = [12, *ck.tokenizer.encode("the capital of australia is canberra"), 13]
    a, b = Twin(ck, widen=len(ids)), Twin(ck, widen=len(ids))
    prefix = _prefix(ck)
    a.prefill_forced(prefix)
    b.prefill_forced(prefix)
    users = _user_frames(ck.lm.card, live_frames + 6, seed=11)
    for user in users[:live_frames]:
        a.step(user)
        b.step(user)
    if live_frames > 100:
        assert a.offset > ck.lm.context  # the conversation is longer than the window
    assert a.read_block(ids) == len(ids)
    b.read_block(ids, positions_per_forward=1)
    _assert_same_state(a, b)
    _continue_equal(a, b, users[live_frames:])


def test_the_frame_a_block_swallows_is_played_with_its_own_semantic_code(tiny_cs_checkpoint):
    ck = tiny_cs_checkpoint
    twin = Twin(ck, widen=16)
    twin.prefill_forced(_prefix(ck))
    users = _user_frames(ck.lm.card, 12, seed=2)
    outs = [twin.step(u) for u in users[:6]]
    book = twin.book
    pending = (twin.offset - 1) % 4
    pending_text = int(book.ring[0, 0, pending])
    pending_semantic = int(book.ring[0, 1, pending])
    offset = twin.offset
    n = twin.read_block([12, 40, 41, 13])
    assert twin.offset == offset + n
    after = twin.step(users[6])
    assert int(after[0]) == CLOSE  # the block's last column, as the reference returns
    assert int(after[1]) == pending_semantic  # ... with the swallowed frame's code
    assert book.restored_text(0) == pending_text
    outs += [after] + [twin.step(u) for u in users[7:]]
    assert all(o is not None for o in outs) and len(outs) == len(users)  # none lost
    assert book.restored_text(0) is None  # only the one frame


def test_a_saved_voice_replays_to_the_state_its_frames_give(tiny_cs_checkpoint):
    """PersonaPlex `.pt` voices hold the input embeddings its server saved and the ring
    after them: replaying them gives the state stepping the voice frames gives."""
    ck = tiny_cs_checkpoint
    prefix = _prefix(ck)
    voice = prefix[:20]  # the voice frames of tiny-cs's default voice
    columns = []
    stepped = Twin(ck, widen=32, capture=lambda sequence: columns.append(sequence.clone()))
    replayed = Twin(ck, widen=32)
    stepped.forced(voice)
    lm = stepped.lm
    with torch.no_grad():
        embeddings = torch.stack([  # what PersonaPlex's server saves per frame: [B, 1, dim]
            sum(lm.emb[k](c[:, k + 1]) for k in range(lm.n_q)) + lm.text_emb(c[:, 0])
            for c in columns])
        replayed.runtime.replay_embeddings(0, embeddings)
    replayed.book.after_saved_voice(0, stepped.book.ring[0].copy(), len(columns))
    assert replayed.offset == stepped.offset
    assert np.array_equal(replayed.book.ring, stepped.book.ring)
    for (ka, ea), (kb, eb) in zip(replayed.kv(), stepped.kv(), strict=True):
        assert ea == eb and torch.allclose(ka, kb, atol=TOL)
    rest = prefix[20:]
    replayed.forced(rest)
    stepped.forced(rest)
    _continue_equal(replayed, stepped, _user_frames(ck.lm.card, 4, seed=9))


@pytest.mark.parametrize("live_frames", [4, 400], ids=["early", "after-the-ring-wrapped"])
def test_a_block_read_padded_to_a_graphed_size_equals_one_forward(tiny_cs_checkpoint,
                                                                  live_frames: int):
    """On a GPU a block goes in as ONE forward padded to a graphed size (position_forwards.py:
    37 positions as 64), its padding rewound: the same frames and logits afterwards as one
    unpadded forward, here on the CPU, also once the KV ring has wrapped (the padding's keys
    then overwrite slots the widened ring keeps out of every window)."""
    from app.engine.position_forwards import padded_pieces, widest_forward

    assert padded_pieces(37) == [(37, 64)] and padded_pieces(600) == [(600, 640)]
    assert padded_pieces(2100) == [(1024, 1024), (1024, 1024), (52, 64)]
    ck = tiny_cs_checkpoint
    ids = [12, *range(20, 55), 13]  # 37 positions
    assert widest_forward(ck.lm, len(ids), padded=True) == 64
    a, b = Twin(ck, widen=len(ids)), Twin(ck, widen=len(ids), padded=True)
    prefix = _prefix(ck)
    a.prefill_forced(prefix)
    b.prefill_forced(prefix)
    users = _user_frames(ck.lm.card, live_frames + 8, seed=4)
    for user in users[:live_frames]:
        a.step(user)
        b.step(user)
    if live_frames > 100:
        assert a.offset > ck.lm.context  # the conversation is longer than the window
    ends = [ring_end(ring) for ring in kv_rings(b.lm)]
    a.read_block(ids)
    assert isinstance(b.runtime, TorchRuntime)
    before = b.runtime.reads_run()
    b.read_block(ids)
    assert b.runtime.reads_run() - before == 1  # one forward for the whole block
    assert 64 in b.runtime.read_sizes()  # padded to the graphed size
    # The padding is taken back: every ring advanced by the block's 37 positions, not 64.
    assert [ring_end(ring) for ring in kv_rings(b.lm)] == [end + len(ids) for end in ends]
    assert [ring_end(ring) for ring in kv_rings(a.lm)] == [ring_end(r) for r in kv_rings(b.lm)]
    assert a.offset == b.offset and np.array_equal(a.book.ring, b.book.ring)
    _continue_equal(a, b, users[live_frames:])


def test_the_padding_is_rewound_from_every_streaming_position(tiny_cs_checkpoint):
    """Without the rewind the padded read would move the model 27 positions ahead: the
    RoPE offsets, the transformer's offsets and the rings' ends all come back."""
    from moshi.modules.streaming import StreamingModule

    from app.moshi_internals import rewind_positions, streaming_state

    ck = tiny_cs_checkpoint
    twin = Twin(ck, widen=64)
    twin.step(_user_frames(ck.lm.card, 1, seed=2)[0])

    def offsets() -> list[int]:
        found = []
        for module in twin.lm.transformer.modules():
            if not isinstance(module, StreamingModule):
                continue
            state = streaming_state(module)
            for name in ("offset", "offsets"):
                value = getattr(state, name, None)
                if isinstance(value, torch.Tensor):
                    found.append(int(value.max()))
        return found + [ring_end(ring) for ring in kv_rings(twin.lm)]

    start = offsets()
    with torch.no_grad():
        twin.lm.forward_text(torch.zeros(1, ck.lm.num_codebooks, 5, dtype=torch.long))
    assert offsets() == [value + 5 for value in start]
    rewind_positions(twin.lm.transformer, 5)
    assert offsets() == start


@pytest.mark.parametrize("use_sampling", [False, True], ids=["greedy", "sampled"])
def test_the_stock_book_is_moshis_lmgen_frame_for_frame(tiny_checkpoint, use_sampling):
    """Vanilla Moshi runs on the engine's own copy of LMGen's bookkeeping (StockColumns):
    against moshi 0.2.13's LMGen on a twin of the model, the same frames come out, with
    span positions read between frames and once the KV ring has wrapped; sampled with the
    same seed too (the same draws in the same order: the text, then each codebook)."""
    from app.engine.position_forwards import positions_codes

    ck = tiny_checkpoint
    ours = Twin(ck, widen=32)
    if use_sampling:
        s = ck.manifest.sampling
        ours.engine.runtime = ours.runtime = TorchRuntime(ours.lm, Sampling(
            False, s.temp, s.temp_text, s.top_k, s.top_k_text))
        ours._streams.close()
        ours._streams.enter_context(ours.runtime.streaming(1, 32))
    lm = copy.deepcopy(ck.lm)
    s = ck.manifest.sampling
    theirs = LMGen(lm, use_sampling=use_sampling, temp=s.temp, temp_text=s.temp_text,
                   top_k=s.top_k, top_k_text=s.top_k_text)
    frames = ck.lm.context + 60
    users = _user_frames(ck.lm.card, frames, seed=21)
    spans = {5: 32, 40: 7, ck.lm.context + 20: 32}  # frame -> positions read before it
    with torch.no_grad(), theirs.streaming(1):
        from app.engine.kv_ring import widen_attention_rings

        widen_attention_rings(lm, 32)
        torch.manual_seed(3)
        for index, user in enumerate(users):
            if index in spans:
                ids = list(range(100, 100 + spans[index]))
                ours.engine.read_positions(0, ids)
                lm.forward_text(positions_codes(lm, ids))
            state = torch.random.get_rng_state()
            mine = ours.step(user)
            torch.random.set_rng_state(state)  # the same draws for moshi's LMGen
            out = theirs.step(user[None, :, None])
            if out is None:
                assert mine is None, f"frame {index}"
            else:
                assert mine is not None and mine.tolist() == out[0, :, 0].tolist(), f"frame {index}"
