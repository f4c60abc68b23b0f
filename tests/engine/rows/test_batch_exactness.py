"""Four conversations on one engine of three rows equal each conversation run alone.

Three rows, four conversations, each with its own speech: A and B talk all along, C leaves
early, D joins late into the row C freed (its reset and conversation start for that row
alone). Spans land at different frames: A's first ones fill the context until the KV ring
has wrapped and a later one lands after that; A and B each get one in the same frame (the
same tick); C and D get their own. With tiny (moshi's LMGen's bookkeeping, spans as
positions in chunks), tiny-cs (the forcing generator: voice and persona start, blocks,
<ret> forced into the text row) and tiny-persona (the forcing generator with dep_q 8: its
voice and persona start, blocks): every column each conversation fed the transformer,
every frame its step returned and every event it emitted equal the same conversation's on
a one-row engine of its own; its audio too, bit for bit with one Mimi stream per row, to
float rounding with batched Mimi (its codes, fed to the LM, are equal either way).
"""

from __future__ import annotations

import pytest

from app.engine import events as ev
from app.engine.local_engine import LocalEngine
from app.engine.speech_engine import EngineOptions
from tests.engine.rows.recording import (
    assert_same_audio,
    comparable,
    conversation_of,
    drain,
    frames_of,
    load,
    record_batched,
    run_alone,
    speech,
)

LONG = ("the river rises in the northern hills and runs south past seven old towns before "
        "it meets the sea at a wide and shallow bay where fishing boats wait for the tide "
        "and the market opens at dawn every day of the week except on the winter holidays")
SAME_FRAME = 12
CONVERSATIONS = {  # name: (speech seed, frames, spans)
    "A": (1, 30, {2: LONG, 4: LONG, 6: LONG, SAME_FRAME: "first of a pair",
                  24: "after the window wrapped"}),
    "B": (2, 30, {SAME_FRAME: "second of a pair", 13: "right after it"}),
    "C": (3, 8, {3: "c leaves early"}),
    "D": (4, 14, {5: "d joined late"}),
}
FORCED_RET = {"B": frozenset({4, 15}), "D": frozenset({9})}


def _options(model: str, name: str) -> EngineOptions:
    forced = FORCED_RET.get(name, frozenset()) if model == "tiny-cs" else frozenset()
    return EngineOptions(greedy=True, chunk_limit=64, input_queue_frames=64,
                         forced_ret_frames=forced)


@pytest.mark.parametrize(("model", "batched_mimi"), [
    ("tiny", True), ("tiny", False), ("tiny-cs", True), ("tiny-persona", False)])
def test_every_conversation_equals_running_it_alone(model, batched_mimi, tiny_folder,
                                                    tiny_cs_folder):
    folder = tiny_cs_folder if model == "tiny-cs" else tiny_folder  # tiny-persona: tiny's
    ck = load(folder, model)
    engine = LocalEngine(ck, 3, EngineOptions(greedy=True, chunk_limit=64),
                           batched_mimi=batched_mimi)
    rec = record_batched(engine)
    pcm = {name: speech(seed, frames) for name, (seed, frames, _s) in CONVERSATIONS.items()}
    slots = {}
    for name in "ABC":  # all queued before the engine starts: A, B, C join at one boundary
        slot = engine.open(_options(model, name))
        assert slot is not None
        for frame, text in CONVERSATIONS[name][2].items():
            slot.inject(text, "test", at_frame=frame)
        for chunk in frames_of(pcm[name]):
            assert slot.push_frame(chunk, timeout=10)
        slot.finish_input()
        slot.start()
        slots[name] = slot
    assert engine.open(_options(model, "D")) is None  # three slots, all taken
    engine.start()
    assert slots["C"].join(300)
    d = engine.open(_options(model, "D"))  # C's row, freed
    assert d is not None and d.row == slots["C"].row
    for frame, text in CONVERSATIONS["D"][2].items():
        d.inject(text, "test", at_frame=frame)
    d.start()
    for chunk in frames_of(pcm["D"]):
        assert d.push_frame(chunk, timeout=60)
    d.finish_input(timeout=60)
    slots["D"] = d
    for slot in slots.values():
        assert slot.join(300)
    assert engine.stop()
    batched = {name: drain(slot.events) for name, slot in slots.items()}

    for name, (_seed, frames, spans) in CONVERSATIONS.items():
        alone = run_alone(folder, model, _options(model, name), pcm[name], spans)
        row = slots[name].row
        together = conversation_of(rec, row, 1 if name == "D" else 0)
        assert len(together.fed) == len(alone.fed), name
        for i, (got, want) in enumerate(zip(together.fed, alone.fed, strict=True)):
            assert got == want, f"{name}: column {i} fed {got}, alone {want}"
        assert together.frames == alone.frames, name
        assert comparable(batched[name]) == comparable(alone.events), name
        assert_same_audio(batched[name], alone.events, exact=not batched_mimi)
        audio = [e for e in batched[name] if isinstance(e, ev.AudioOut)]
        assert [a.frame_index for a in audio] == list(range(frames))
        landed = [e.first_frame for e in batched[name] if isinstance(e, ev.SpanInjected)]
        assert landed == sorted(spans), name  # every span landed, at its own frame
        stopped = [e for e in batched[name] if isinstance(e, ev.EngineStopped)]
        assert [(s.frames, s.reason) for s in stopped] == [(frames, "end of input")]

    # The scenario happened as described: the ring had wrapped before A's last span; A's
    # and B's pair went in the same tick, each through a forward of its own row; D stepped
    # in the same batched steps as A and B.
    stats = [e for e in batched["A"] if isinstance(e, ev.FrameStats)]
    assert stats[23].context.wrapped
    rows = {name: slot.row for name, slot in slots.items()}
    steps = [i for i, f in enumerate(rec.forwards) if f[0] == "step"]
    between = [{f[1] for f in rec.forwards[a + 1:b] if f[0] == "row"}
               for a, b in zip(steps, steps[1:], strict=False)]
    assert any({rows["A"], rows["B"]} <= gap for gap in between)
    assert any({rows["A"], rows["B"], rows["D"]} <= set(f[1]) for f in rec.forwards
               if f[0] == "step")
    if model == "tiny-cs":
        assert any(isinstance(e, ev.RetToken) for e in batched["B"])
