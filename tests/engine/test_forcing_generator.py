"""The forcing generator on tiny-cs (dep_q 16): the user is heard, the batched prefix equals
the stepwise one, a block in one forward equals its columns one at a time (before and after
the KV ring wraps), and the frame a block swallows is still played."""

from __future__ import annotations

import copy

import pytest
import torch
from moshi.models import LMGen

from app.engine.conversation_start import placeholder_codes, plan_start
from app.engine.forcing_generator import ForcedStep, ForcingGenerator
from app.engine.kv_ring import widen_attention_rings
from app.engine.span_block import block_columns
from app.moshi_internals import kv_rings, ring_end

TOL = 1e-4
CLOSE = 13


class Twin:
    """A generator on its own copy of the LM, recording every text-logit row it produced."""

    def __init__(self, lm, widen: int = 1) -> None:
        self.lm = copy.deepcopy(lm)
        self.logits: list[torch.Tensor] = []
        original = self.lm.forward_text

        def recording(sequence, *args):
            out, text_logits = original(sequence, *args)
            self.logits.append(text_logits.detach().clone())
            return out, text_logits

        self.lm.forward_text = recording
        self.gen = ForcingGenerator(self.lm, use_sampling=False)
        self.gen.streaming_forever(1)
        widen_attention_rings(self.lm, widen)

    def step(self, user: torch.Tensor, agent=None, text=None):
        return self.gen.step(user[None, :, None], None if agent is None else agent[None, :, None],
                             None if text is None else torch.tensor([text]))

    def forced(self, steps: list[ForcedStep]) -> None:
        for s in steps:
            self.gen.step(torch.tensor([s.user])[:, :, None], torch.tensor([s.agent])[:, :, None],
                          torch.tensor([s.text]))

    def kv(self) -> list[tuple[torch.Tensor, int]]:
        return [(ring.cache.clone(), ring_end(ring)) for ring in kv_rings(self.lm)]


def _assert_same_state(a: Twin, b: Twin) -> None:
    sa, sb = a.gen.state, b.gen.state
    assert sa.offset == sb.offset
    assert torch.equal(sa.ring, sb.ring)
    assert torch.equal(sa.provided, sb.provided)
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
        assert torch.equal(out_a, out_b)
        assert torch.allclose(a.logits[ia], b.logits[ib], atol=TOL)


def test_the_user_is_heard_with_a_16_codebook_depformer(tiny_cs_checkpoint):
    ck = tiny_cs_checkpoint
    a, b = Twin(ck.lm), Twin(ck.lm)
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
    assert torch.equal(out_a[:, :9], out_b[:, :9])
    assert int(out_a[0, 9, 0]) == int(users[4][0])  # frame 4's user code, one frame behind
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
    a, b = Twin(ck.lm, widen=64), Twin(ck.lm, widen=64)
    with torch.no_grad():
        fed = a.gen.prefill_forced(prefix)
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
    placeholders = placeholder_codes(ck.mimi, None, None)
    ids = [12, *ck.tokenizer.encode("the capital of australia is canberra"), 13]
    block = block_columns(ids, placeholders, ck.lm.num_codebooks)
    a, b = Twin(ck.lm, widen=len(ids)), Twin(ck.lm, widen=len(ids))
    prefix = _prefix(ck)
    with torch.no_grad():
        a.gen.prefill_forced(prefix)
        b.gen.prefill_forced(prefix)
    users = _user_frames(ck.lm.card, live_frames + 6, seed=11)
    for user in users[:live_frames]:
        a.step(user)
        b.step(user)
    if live_frames > 100:
        assert a.gen.offset > ck.lm.context  # the conversation is longer than the window
    with torch.no_grad():
        assert a.gen.inject_block(block) == len(ids)
        b.gen.inject_block(block, positions_per_forward=1)
    _assert_same_state(a, b)
    _continue_equal(a, b, users[live_frames:])


def test_the_frame_a_block_swallows_is_played_with_its_own_semantic_code(tiny_cs_checkpoint):
    ck = tiny_cs_checkpoint
    placeholders = placeholder_codes(ck.mimi, None, None)
    twin = Twin(ck.lm, widen=16)
    with torch.no_grad():
        twin.gen.prefill_forced(_prefix(ck))
    users = _user_frames(ck.lm.card, 12, seed=2)
    outs = [twin.step(u) for u in users[:6]]
    state = twin.gen.state
    pending = (state.offset - 1) % 4
    pending_text = int(state.ring[0, 0, pending])
    pending_semantic = int(state.ring[0, 1, pending])
    offset = state.offset
    with torch.no_grad():
        n = twin.gen.inject_block(block_columns([12, 40, 41, 13], placeholders, 17))
    assert twin.gen.offset == offset + n
    after = twin.step(users[6])
    assert int(after[0, 0, 0]) == CLOSE  # the block's last column, as the reference returns
    assert int(after[0, 1, 0]) == pending_semantic  # ... with the swallowed frame's code
    assert int(state.restored_text[0]) == pending_text
    outs += [after] + [twin.step(u) for u in users[7:]]
    assert all(o is not None for o in outs) and len(outs) == len(users)  # none lost
    assert state.restored_text is None  # only the one frame


def test_a_saved_voice_replays_to_the_state_its_frames_give(tiny_cs_checkpoint):
    """PersonaPlex `.pt` voices hold the input embeddings its server saved and the ring
    after them: replaying them gives the state stepping the voice frames gives."""
    ck = tiny_cs_checkpoint
    prefix = _prefix(ck)
    voice = prefix[:20]  # the voice frames of tiny-cs's default voice
    stepped, replayed = Twin(ck.lm, widen=32), Twin(ck.lm, widen=32)
    columns = []
    original = stepped.lm.forward_text

    def capture(sequence, *args):
        columns.append(sequence.clone())
        return original(sequence, *args)

    stepped.lm.forward_text = capture
    stepped.gen.state.graphed_main.func = capture
    stepped.forced(voice)
    lm = stepped.lm
    embeddings = torch.stack([  # what PersonaPlex's server saves per frame: [B, 1, dim]
        sum(lm.emb[k](c[:, k + 1]) for k in range(lm.n_q)) + lm.text_emb(c[:, 0])
        for c in columns])
    with torch.no_grad():
        replayed.gen.replay_embeddings(embeddings, stepped.gen.state.ring.clone())
    assert replayed.gen.offset == stepped.gen.offset
    assert torch.equal(replayed.gen.state.ring, stepped.gen.state.ring)
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
    from app.engine.position_forwards import PositionForwards, padded_pieces, widest_forward

    assert padded_pieces(37) == [(37, 64)] and padded_pieces(600) == [(600, 640)]
    assert padded_pieces(2100) == [(1024, 1024), (1024, 1024), (52, 64)]
    ck = tiny_cs_checkpoint
    placeholders = placeholder_codes(ck.mimi, None, None)
    ids = [12, *range(20, 55), 13]  # 37 positions
    block = block_columns(ids, placeholders, ck.lm.num_codebooks)
    padded_width = widest_forward(ck.lm, len(ids), padded=True)
    assert padded_width == 64
    a, b = Twin(ck.lm, widen=len(ids)), Twin(ck.lm, widen=padded_width)
    b.gen.state.forwards = forwards = PositionForwards(b.lm, padded=True)
    prefix = _prefix(ck)
    with torch.no_grad():
        a.gen.prefill_forced(prefix)
        b.gen.prefill_forced(prefix)
    users = _user_frames(ck.lm.card, live_frames + 8, seed=4)
    for user in users[:live_frames]:
        a.step(user)
        b.step(user)
    if live_frames > 100:
        assert a.gen.offset > ck.lm.context  # the conversation is longer than the window
    ends = [ring_end(ring) for ring in kv_rings(b.lm)]
    with torch.no_grad():
        a.gen.inject_block(block)
        before = forwards.forward_count
        b.gen.inject_block(block)
    assert forwards.forward_count - before == 1  # one forward for the whole block
    # The padding is taken back: every ring advanced by the block's 37 positions, not 64.
    assert [ring_end(ring) for ring in kv_rings(b.lm)] == [end + len(ids) for end in ends]
    assert [ring_end(ring) for ring in kv_rings(a.lm)] == [ring_end(r) for r in kv_rings(b.lm)]
    sa, sb = a.gen.state, b.gen.state
    assert sa.offset == sb.offset and torch.equal(sa.ring, sb.ring)
    _continue_equal(a, b, users[live_frames:])


def test_the_padding_is_rewound_from_every_streaming_position(tiny_cs_checkpoint):
    """Without the rewind the padded read would move the model 27 positions ahead: the
    RoPE offsets, the transformer's offsets and the rings' ends all come back."""
    from moshi.modules.streaming import StreamingModule

    from app.moshi_internals import rewind_positions, streaming_state

    ck = tiny_cs_checkpoint
    twin = Twin(ck.lm, widen=64)
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
