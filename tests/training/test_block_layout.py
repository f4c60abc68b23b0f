"""The block training layout IS what the forcing generator feeds: same columns, same logits.

tiny-cs (dep_q 16, blocks) streams through the engine's forcing bookkeeping (a one-row
engine driven without its thread, tests/engine/driven.py): the persona start in one
batched prefill, random user frames, greedy frames, span blocks injected right after the start,
mid-stream, in two consecutive frame gaps and after the KV window (375) wrapped. Every column
fed to the transformer is recorded with its text logits. From the run's outputs alone
(plus the user frames given) the aligned codes are rebuilt; `build_block_layout` (splice,
start, delays) must then give exactly the fed integer sequence, and one offline forward over it
the same text logits at every position.
"""

from __future__ import annotations

import copy
import random
from collections import Counter

import pytest
import torch

from app.engine.conversation_start import Placeholders, plan_start
from app.engine.span_block import block_columns
from app.moshi_internals import delay_sequence, initial_tokens
from app.training.block_layout import (
    acoustic_rows,
    audio_codebook_weights,
    block_layout_losses,
    build_block_layout,
    checkpoint_placeholders,
    inject_frame,
    prefix_codes,
    sample_rag_delay,
    splice_blocks,
    text_loss_weights,
    window_start,
)
from app.training.span_layout import SpanInsert
from tests.engine.driven import DrivenEngine

TOL = 1e-4
OPEN, CLOSE = 12, 13
LIVE_FRAMES = 330
SPANS = {0: "right after the start", 9: "the capital of australia is canberra",
         20: "first of two", 21: "second of two", 310: "after the window wrapped"}


@pytest.fixture(scope="module")
def run(tiny_cs_folder):
    """One recorded greedy conversation on tiny-cs, and the aligned codes it corresponds to."""
    from app.checkpoints.catalog import get_manifest
    from app.checkpoints.loader import load_checkpoint

    ck = load_checkpoint(get_manifest("tiny-cs"), tiny_cs_folder, device="cpu")
    pristine = copy.deepcopy(ck.lm)
    lm = ck.lm
    placeholders = checkpoint_placeholders(ck)
    steps = plan_start(ck.manifest, ck.folder, ck.mimi, ck.tokenizer, placeholders,
                       lm.text_padding_token_id, frozenset({4, OPEN, CLOSE}),
                       persona="You are a wise and friendly teacher.", user_name="Ada",
                       user_city="Seoul").steps
    ids = {f: (OPEN, *ck.tokenizer.encode(text), CLOSE) for f, text in SPANS.items()}
    spans = [SpanInsert(f, i) for f, i in ids.items()]

    fed: list[torch.Tensor] = []
    logits: list[torch.Tensor] = []
    original = lm.forward_text

    def record(sequence, *args):
        out, text_logits = original(sequence, *args)
        fed.append(sequence.clone())
        logits.append(text_logits.clone())
        return out, text_logits

    lm.forward_text = record  # before the engine: its step captures the bound method
    engine = DrivenEngine(ck, widen=max(len(i) for i in ids.values()), lm=lm)
    users = torch.randint(0, lm.card, (LIVE_FRAMES, 8), generator=torch.Generator().manual_seed(7))
    outs: list[tuple[torch.Tensor, int | None]] = []
    offsets = {}
    engine.prefill_forced(list(steps))
    for i in range(LIVE_FRAMES):
        if i in ids:
            offsets[i] = engine.offset
            engine.read_block(list(ids[i]))
        out = engine.step(users[i])
        assert out is not None
        outs.append((torch.from_numpy(out), engine.book.restored_text(0)))

    # Aligned codes. Step i returns the frame before its own (the last forced step for i = 0);
    # after a block, that frame carries the block's close id and the placeholders' user
    # semantic code: its text is the restored one, its user semantic code the one given.
    # Its acoustic codes (the model's and, with dep_q 16, the user's) are what the step sampled.
    prefix = prefix_codes(steps)  # [17, P]
    given_users = [torch.tensor(steps[-1].user)] + list(users)
    frames = []
    for i, (out, restored) in enumerate(outs):
        frame = out.clone()
        frame[9] = given_users[i][0]
        if restored is not None:
            assert int(out[0]) == CLOSE
            frame[0] = restored
        else:
            assert torch.equal(out[9:], given_users[i])  # the user frame came back as given
        frames.append(frame)
    last_start = frames.pop(0)  # the start's last frame
    assert torch.equal(last_start[[0, 1, 9]], prefix[[0, 1, 9], -1])
    prefix[:, -1] = last_start  # its acoustic codes sampled again after the block at frame 0
    codes = torch.stack(frames, dim=1)  # [17, LIVE_FRAMES - 1]
    return {
        "ck": ck, "lm": pristine, "placeholders": placeholders, "steps": steps,
        "prefix": prefix, "codes": codes, "spans": spans, "offsets": offsets, "outs": outs,
        "users": users, "fed": torch.cat(fed, dim=2), "logits": torch.cat(logits, dim=2),
    }


def _whole(layout) -> torch.Tensor:
    """Every column of the layout: its inputs, then the last target (fed by the last step)."""
    return torch.cat([layout.inputs, layout.targets[:, :, -1:]], dim=2)


def test_the_layout_is_every_column_the_generator_fed(run):
    lm, fed = run["lm"], run["fed"]
    layout = build_block_layout(lm, run["codes"], run["spans"], run["placeholders"],
                                run["prefix"])
    assert run["offsets"][310] > lm.context  # the last block went in after the window wrapped
    assert fed.shape[-1] > lm.context + 50
    whole = _whole(layout)
    assert whole.shape == fed.shape
    mismatch = (whole != fed).any(dim=1)[0].nonzero()[:, 0].tolist()
    assert not mismatch, f"columns differ at positions {mismatch[:10]}"
    # One offline forward (no streaming state; the same 375-position attention window,
    # which the widened rings keep exact for the stream) gives the streamed text logits.
    offline = copy.deepcopy(lm)
    with torch.no_grad():
        _, offline_logits = offline.forward_text(whole)  # [1, 1, S + 1, card]
    diff = (offline_logits - run["logits"]).abs().amax(dim=-1)[0, 0]  # [S + 1]
    assert diff[: lm.context].max().item() < TOL  # before the window wrapped
    assert diff[lm.context :].max().item() < TOL  # and after
    # Greedy: every conversation frame's text is the argmax where the layout predicts it.
    positions = layout.frame_positions
    assert len(positions) == run["codes"].shape[-1]
    chosen = offline_logits[0, 0, positions].argmax(-1)
    assert torch.equal(chosen, layout.targets[0, 0, positions])


def test_blocks_have_no_loss_and_the_moved_frame_no_audio_loss(run):
    lm = run["lm"]
    layout = build_block_layout(lm, run["codes"], run["spans"], run["placeholders"],
                                run["prefix"])
    sizes = [len(s.ids) for s in run["spans"]]
    assert int(layout.span_mask.sum()) == sum(sizes)
    block_inputs = layout.inputs[0, 0, layout.span_mask]
    assert Counter(block_inputs.tolist())[OPEN] == len(sizes)
    # A position's target is the next input: the block's columns (its open id fed next,
    # through its close id) and the start are never learnt; every conversation frame's text is.
    target_is_block = torch.cat([layout.span_mask[1:], torch.zeros(1, dtype=torch.bool)])
    assert int(target_is_block.sum()) == sum(sizes)
    assert not layout.text_loss_mask[0, target_is_block].any()
    start = len(run["steps"]) - 1
    assert not layout.text_loss_mask[0, :start].any()
    assert not layout.audio_loss_mask[0, :, :start].any()
    assert layout.text_loss_mask[0, layout.frame_positions].all()
    # Frame f - 1 of each block (f > 0) has no audio loss; every other frame has, on its
    # semantic code where its text is predicted and on its acoustic codes one position later.
    moved = {s.frame - 1 for s in run["spans"] if s.frame > 0}
    positions = layout.frame_positions.tolist()
    assert [bool(layout.audio_loss_mask[0, 0, p]) for p in positions] == [
        t not in moved for t in range(len(positions))]
    assert [bool(layout.audio_loss_mask[0, 1, p + 1]) for p in positions[:-1]] == [
        t not in moved for t in range(len(positions) - 1)]


def test_without_the_move_the_layout_is_not_what_the_generator_fed(run):
    lm, fed = run["lm"], run["fed"]
    placeholders = run["placeholders"]
    codes = run["codes"]
    pieces, cursor = [], 0
    for span in sorted(run["spans"], key=lambda s: s.frame):
        pieces += [codes[:, cursor : span.frame],
                   torch.from_numpy(block_columns(span.ids, placeholders, lm.num_codebooks))]
        cursor = span.frame
    naive = torch.cat([run["prefix"], *pieces, codes[:, cursor:]], dim=1)[:, 1:]
    initial = initial_tokens(lm)
    delayed = delay_sequence(lm.delays, naive[None], initial)
    wrong = torch.cat([initial, delayed], dim=2)
    assert wrong.shape == fed.shape
    assert not torch.equal(wrong, fed)
    rows = (wrong != fed)[0].any(dim=1).nonzero()[:, 0].tolist()
    assert set(rows) <= set(acoustic_rows(placeholders))  # only the acoustic codes moved
    # ... at each block's first column and the column after it: the codes sampled after
    # the block would be read one block too early, and the placeholders after it.
    right = build_block_layout(lm, codes, run["spans"], placeholders, run["prefix"])
    block = torch.cat([right.span_mask, torch.zeros(1, dtype=torch.bool)])  # [S + 1]
    edges = block[1:] != block[:-1]
    expected = (edges.nonzero()[:, 0] + 1).tolist()  # first block columns, then the next
    assert len(expected) == 2 * len(run["spans"])
    assert (wrong != fed).any(dim=1)[0].nonzero()[:, 0].tolist() == expected


def test_the_swallowed_frames_user_acoustic_codes_are_sampled_at_inference(run):
    """dep_q 16: the user's acoustic codes of the frame a block swallows are the model's own
    samples in the generator, not the frame it was given (what real training data holds)."""
    users, outs = run["users"], run["outs"]
    differs = [not torch.equal(outs[f][0][10:17], users[f - 1][1:]) for f in SPANS if f > 0]
    assert any(differs)


def test_splice_blocks_follows_the_reference_rules():
    ph = Placeholders(agent=tuple(range(100, 108)), user=tuple(range(200, 208)))
    codes = torch.arange(17 * 5).reshape(17, 5) + 1000  # [17, 5]
    mask = torch.ones(5, dtype=torch.bool)
    spliced = splice_blocks(codes, mask, [SpanInsert(2, (12, 40, 13)), SpanInsert(9, (12, 13))],
                            ph)
    moved = acoustic_rows(ph)
    assert moved == [*range(2, 9), *range(10, 17)]
    # The late span is clamped to the last frame (4): blocks before frames 2 and 4.
    assert spliced.frame_index.tolist() == [0, 1, -1, -1, -1, 2, 3, -1, -1, 4]
    block = spliced.codes[:, 2:5]
    assert block[0].tolist() == [12, 40, 13]
    assert block[1:9, :2].T.tolist() == [list(range(100, 108))] * 2
    assert block[moved, 2].tolist() == codes[moved, 1].tolist()  # frame 1's acoustic codes
    assert spliced.codes[moved, 1].tolist() == [*range(101, 108), *range(201, 208)]
    assert spliced.codes[[0, 1, 9], 1].tolist() == codes[[0, 1, 9], 1].tolist()
    assert spliced.audio_mask.tolist() == [True, False, False, False, False, True, False, False,
                                           False, True]
    assert spliced.text_mask.tolist() == [True, True, False, False, False, True, True, False,
                                          False, True]
    # At frame 0 nothing moves.
    first = splice_blocks(codes, mask, [SpanInsert(0, (12, 13))], ph)
    assert torch.equal(first.codes[:, 2:], codes) and first.audio_mask[2:].all()


class _ScriptedRng:
    """random.Random's two calls, scripted: random() returns `u`; randint records its bounds
    and returns the upper one."""

    def __init__(self, u: float) -> None:
        self.u = u
        self.bounds: list[tuple[int, int]] = []

    def random(self) -> float:
        return self.u

    def randint(self, a: int, b: int) -> int:
        self.bounds.append((a, b))
        return b


def test_rag_delay_bounds_branches_and_bankers_rounding():
    # A lead under 2 s (25 frames): uniform over the whole lead, whatever the coin.
    rng = _ScriptedRng(0.9)
    assert sample_rag_delay(24, rng) == 24 and rng.bounds == [(0, 24)]
    # The 20 % branch: uniform over the whole lead.
    rng = _ScriptedRng(0.19)
    sample_rag_delay(100, rng)
    assert rng.bounds == [(0, 100)]
    # Otherwise [round(12.5), round(lead - 12.5)]: to even on .5 (12, and 28 for 41 and 40).
    for lead, high in ((41, 28), (40, 28), (100, 88), (25, 12)):
        rng = _ScriptedRng(0.2)
        sample_rag_delay(lead, rng)
        assert rng.bounds == [(12, high)], lead
    # Over many draws: inside [0, lead], both branches seen, ~80 % + in the middle band.
    rng = random.Random(0)
    draws = [sample_rag_delay(100, rng) for _ in range(4000)]
    assert min(draws) >= 0 and max(draws) <= 100
    outside = sum(d < 12 or d > 88 for d in draws) / len(draws)
    assert 0.01 < outside < 0.1  # expected 0.2 * 24 / 101 = 0.048
    short = [sample_rag_delay(10, rng) for _ in range(2000)]
    assert set(short) == set(range(11))
    # The span lands at least one frame after <ret>, even when the cap is not after it.
    rng = random.Random(1)
    assert all(inject_frame(50, 40, rng) == 51 for _ in range(50))
    frames = [inject_frame(10, 110, rng) for _ in range(2000)]
    assert min(frames) >= 11 and max(frames) <= 110


def test_the_window_is_cut_at_random_to_the_context(run):
    lm = run["lm"]
    assert window_start(100, 375, random.Random(0)) == 0
    starts = {window_start(1000, 375, random.Random(seed)) for seed in range(50)}
    assert min(starts) >= 0 and max(starts) <= 625 and len(starts) > 10
    full = build_block_layout(lm, run["codes"], run["spans"], run["placeholders"],
                              run["prefix"])
    rng = random.Random(3)
    cut = build_block_layout(lm, run["codes"], run["spans"], run["placeholders"],
                             run["prefix"], context=200, rng=rng)
    s0 = window_start(full.inputs.shape[-1], 200, random.Random(3))
    assert cut.inputs.shape[-1] == 200
    # The window's frames are the full layout's from s0 on, delayed anew (initial column).
    assert torch.equal(cut.targets[:, 0], full.targets[:, 0, s0 : s0 + 200])
    assert torch.equal(cut.inputs[:, :, 0], initial_tokens(lm)[:, :, 0])


def test_the_reference_loss_weights(run):
    targets = torch.tensor([[3, 4, 7, 3, 4]])
    mask = torch.tensor([[True, True, True, False, False]])
    assert text_loss_weights(targets, mask).tolist() == [[0.5, 5.0, 1.0, 0.0, 0.0]]
    weights = audio_codebook_weights(16)
    assert weights[0] == 1.0 and torch.allclose(weights[1:], torch.full((15,), 0.02))
    lm = run["lm"]
    layout = build_block_layout(lm, run["codes"], run["spans"], run["placeholders"],
                                run["prefix"])
    with torch.no_grad():
        text_loss, audio_loss = block_layout_losses(lm, layout, audio=True)
    assert torch.isfinite(text_loss) and audio_loss is not None and torch.isfinite(audio_loss)


def test_the_recipe_trains_tiny_cs_in_the_block_layout(tiny_cs_folder, tmp_path, monkeypatch):
    """`train recipe` on a block checkpoint: the start goes in as the layout's prefix, every
    sequence is a block layout, and the result loads as a model the engine can run."""
    from app.checkpoints.catalog import get_manifest, load_user_manifests
    from app.checkpoints.loader import load_checkpoint
    from app.training import block_layout
    from app.training.recipe import RecipeConfig, run_recipe
    from app.training.tts import EspeakSynthesizer

    data = tmp_path / "data"
    (data / "checkpoints").mkdir(parents=True)
    (data / "checkpoints" / "tiny-cs").symlink_to(tiny_cs_folder)
    monkeypatch.setenv("CONTEXTSPAN_DATA_DIR", str(data))
    built = []
    build = block_layout.build_block_layout

    def spy(*args, **kwargs):
        built.append(build(*args, **kwargs))
        return built[-1]

    monkeypatch.setattr(block_layout, "build_block_layout", spy)
    ck = load_checkpoint(get_manifest("tiny-cs"), tiny_cs_folder, device="cpu")
    config = RecipeConfig(dialogues=2, max_per_conversation=2, steps=2, batch_size=1, seed=1)
    report, recipe_data, result = run_recipe(ck, EspeakSynthesizer(), config, tmp_path / "out",
                                             "tiny-cs-recipe-test")
    assert len(result.losses) == 2 and report["steps"] == 2
    assert len(built) == 2 and all(int(layout.span_mask.sum()) > 0 for layout in built)
    example = recipe_data.conversations[0].example
    plan = plan_start(ck.manifest, ck.folder, ck.mimi, ck.tokenizer, checkpoint_placeholders(ck),
                      ck.lm.text_padding_token_id, frozenset({OPEN, CLOSE}))
    assert torch.equal(example.prefix, prefix_codes(plan.steps))  # the engine's own start
    assert example.codes.shape[-1] == example.answer_frames.shape[-1]  # the start is apart
    loaded = load_checkpoint(load_user_manifests()["tiny-cs-recipe-test"])
    assert loaded.lm.dep_q == 16 and loaded.manifest.span_placement.kind == "block"
    for key, value in ck.lm.state_dict().items():
        assert torch.equal(loaded.lm.state_dict()[key], value), key
