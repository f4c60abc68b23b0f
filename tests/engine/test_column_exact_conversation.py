"""Every column the engine feeds the transformer in a tiny-cs conversation, checked against
the sequence the reference's rules give, rebuilt here on their own:

- the start: column 0 all initial tokens; column c >= 1 holds forced frame c's text and
  semantic codes (rows 0, 1, 9) and frame c - 1's acoustic codes (the other rows), initial
  ones in column 1; the last forced column is fed by the first live frame;
- a live frame given at offset o: the user's frame goes into the target column o (its
  acoustic codes into o + 1); the step feeds column o - 1;
- a block: ONE forward over [pending column] + block[:n - 1], the block's last column fed by
  the next live step; after it, the user's acoustic codes of the swallowed frame are gone
  (sampled by the 16-codebook depformer);
- the first frame out after a block carries the pending column's semantic code.

The voice prefix, the persona, live frames, a block mid-sentence, two blocks in a row, and
a block after the KV ring has wrapped are all in one greedy conversation.
"""

from __future__ import annotations

import numpy as np

from app.engine import events as ev
from app.engine.local_engine import open_conversation
from app.engine.span_block import block_columns
from app.engine.speech_engine import EngineOptions
from app.frames import FRAME_SAMPLES
from app.moshi_internals import initial_tokens

D0 = (0, 1, 9)  # rows at delay 0: text, the model's and the user's semantic codes
D1 = tuple(r for r in range(17) if r not in D0)
SPANS = {10: "the capital of australia is canberra", 20: "first of two", 21: "second of two",
         390: "after the window wrapped"}
FRAMES = 400


def _run_recorded(ck):
    lm = ck.lm
    fed: list[list[int]] = []
    recording = {"on": False}
    original = lm.forward_text

    def record(sequence, *args):
        if recording["on"]:
            fed.extend(sequence[0, :, i].tolist() for i in range(sequence.shape[-1]))
        return original(sequence, *args)

    lm.forward_text = record
    engine = open_conversation(ck, EngineOptions(seed=0, greedy=True, chunk_limit=8))
    local = engine.engine  # the conversation's one-row engine
    book = local.book
    timeline: list[tuple] = []
    plan_steps: list = []
    plan, reset_row = local._plan, local.runtime.reset_row

    def planned(options, mimi):
        start = plan(options, mimi)
        if start is not None:
            plan_steps.extend(start.steps)
        return start

    def reset(row):
        reset_row(row)
        if local.ready.is_set():  # the warm-up is forgotten; the conversation starts here
            recording["on"] = True

    local._plan = planned
    local.runtime.reset_row = reset
    step_rows, read_block = local.step_rows, local.read_block

    def recorded_step(rows, user, *args):
        offset = int(book.offset[0])
        out = step_rows(rows, user, *args)[0]
        restored = book.restored_text(0)
        if recording["on"]:
            timeline.append(("step", offset, user[0].tolist(),
                             None if out is None else out.tolist(), restored))
        return [out]

    def recorded_block(row, ids):
        if recording["on"]:
            block = block_columns(ids, local.placeholders, 17)
            timeline.append(("block", int(book.offset[0]), block))
        return read_block(row, ids)

    local.step_rows, local.read_block = recorded_step, recorded_block
    for frame, text in SPANS.items():
        engine.inject(text, "test", at_frame=frame)
    audio = np.random.default_rng(0).normal(0, 0.1, FRAMES * FRAME_SAMPLES).astype(np.float32)
    engine.start()
    for i in range(FRAMES):
        assert engine.push_frame(audio[i * FRAME_SAMPLES:(i + 1) * FRAME_SAMPLES], timeout=30)
    engine.finish_input()
    assert engine.join(300)
    events = []
    while not engine.events.empty():
        events.append(engine.events.get_nowait())
    return engine, fed, plan_steps, timeline, events


def _expected(initial: list[int], prefix: list, timeline: list[tuple]) -> tuple[list, dict]:
    """The fed sequence from the rules: pass 1 fills each column, pass 2 orders them."""
    columns: dict[int, list] = {0: list(initial)}

    def full(step) -> list[int]:
        return [step.text, *step.agent, *step.user]

    for i in range(1, len(prefix)):
        column = [None] * 17
        for r in D0:
            column[r] = full(prefix[i])[r]
        for r in D1:
            column[r] = initial[r] if i == 1 else full(prefix[i - 1])[r]
        columns[i] = column
    pending_of_block: dict[int, int] = {}
    for entry in timeline:
        if entry[0] == "step":
            _, o, user, out, restored = entry
            columns.setdefault(o, [None] * 17)[9] = user[0]
            if out is None:
                continue
            if restored is not None:  # first frame after a block: the swallowed column
                pending = pending_of_block[o]
                columns[pending][0], columns[pending][1] = restored, out[1]
            else:
                columns[o - 1][0], columns[o - 1][1] = out[0], out[1]
            for r in D1:
                columns[o][r] = out[r]
        else:
            _, offset_before, block = entry
            n = block.shape[-1]
            pending_of_block[offset_before + n] = offset_before - 1
    for entry in timeline:  # block columns, over whatever a user frame wrote there
        if entry[0] == "block":
            _, offset_before, block = entry
            for k in range(block.shape[-1]):
                columns[offset_before + k] = block[:, k].tolist()
    fed = [columns[c] for c in range(len(prefix) - 1)]
    for entry in timeline:
        if entry[0] == "step":
            fed.append(columns[entry[1] - 1])
        else:
            _, offset_before, block = entry
            fed.append(columns[offset_before - 1])
            fed += [columns[offset_before + k] for k in range(block.shape[-1] - 1)]
    return fed, columns


def test_every_fed_column_follows_the_reference_rules(tiny_cs_checkpoint):
    ck = tiny_cs_checkpoint
    engine, fed, prefix, timeline, events = _run_recorded(ck)
    initial = initial_tokens(ck.lm)[0, :, 0].tolist()
    expected, columns = _expected(initial, prefix, timeline)
    assert len(fed) == len(expected)
    for index, (got, want) in enumerate(zip(fed, expected, strict=True)):
        assert got == want, f"position {index}: fed {got}, the rules give {want}"

    # Each span went in as one block, in its own frame gap, and the window had wrapped
    # before the last one.
    injected = [e for e in events if isinstance(e, ev.SpanInjected)]
    assert [e.first_frame for e in injected] == list(SPANS)
    assert all(e.chunks == 1 for e in injected)
    stats = [e for e in events if isinstance(e, ev.FrameStats)]
    assert stats[389].context.wrapped
    # No audio frame lost or duplicated; the control ids never reach the transcript.
    outs = [e for e in events if isinstance(e, ev.AudioOut)]
    assert [o.frame_index for o in outs] == list(range(FRAMES))
    assert not any(e.token_id in (4, 12, 13) for e in events if isinstance(e, ev.TextPiece))

    steps = [e for e in timeline if e[0] == "step"]
    blocks = [e for e in timeline if e[0] == "block"]
    # The first live target's acoustic rows are the forced silence, the user's the tone.
    first = steps[0]
    silence, tone = prefix[-1].agent, prefix[-1].user
    assert first[3][2:9] == list(silence[1:]) and first[3][10:17] == list(tone[1:])
    for block in blocks:
        offset_before, n = block[1], block[2].shape[-1]
        after = next(s for s in steps if s[1] == offset_before + n)
        pending = columns[offset_before - 1]
        assert after[3][0] == 13  # the block's last column, as the reference returns it
        assert after[3][1] == pending[1]  # ... played with the swallowed frame's code
        assert after[4] == pending[0]  # the swallowed text, restored for the transcript
    # A user frame's acoustic codes reach the next column, except across a block.
    block_follows = {b[1] for b in blocks}
    for previous, current in zip(steps, steps[1:], strict=False):
        if current[1] == previous[1] + 1 and current[1] not in block_follows:
            assert current[3] is None or columns[current[1]][10:17] == previous[2][1:]
