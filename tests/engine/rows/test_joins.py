"""Conversations joining and leaving cost the one already talking nothing it can hear
(issue 33): a start goes in pieces beside the others' frames, never in one blocking go.

tiny-cs on an engine of three rows: L talks all along, one frame at a time (it waits for
each frame's audio before it sends the next, as a microphone paces it). Meanwhile J1 joins
with a cloned voice (a recording Mimi must encode), leaves early, and J3 takes its row; J2
joins with the default voice and talks. Every start is read for its row alone in pieces of
at most the chunk limit (8 positions here; the start is 54), its voice recording encoded
on the planner's thread, not the engine's. L's frames all come back, in order, none lost;
each joiner's conversation is exactly the one it has alone on a one-row engine, whose start
goes in whole: every column fed, every frame out.
"""

from __future__ import annotations

import queue
import threading
import time
from pathlib import Path

from app.audio_file import write_wav_24k
from app.engine import events as ev
from app.engine.local_engine import LocalEngine
from app.engine.speech_engine import EngineOptions
from tests.engine.rows.recording import (
    comparable,
    conversation_of,
    drain,
    frames_of,
    load,
    record_batched,
    run_alone,
    speech,
)

CHUNK = 8
L_FRAMES = 40
J_FRAMES = 8
WAIT_S = 120.0


def _audio_index(events: queue.SimpleQueue, seen: list, timeout: float = WAIT_S) -> int:
    """The next AudioOut's frame index (events before it kept in `seen`)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            event = events.get(timeout=0.1)
        except queue.Empty:
            continue
        seen.append(event)
        if isinstance(event, ev.AudioOut):
            return event.frame_index
    raise AssertionError("no audio came back")


def test_joins_go_in_pieces_beside_a_talking_conversation(tiny_cs_folder, tmp_path: Path):
    voice = tmp_path / "my-voice.wav"
    write_wav_24k(voice, speech(11, 40))  # 3.2 s: its Mimi frames are the voice prompt
    ck = load(tiny_cs_folder, "tiny-cs")
    engine = LocalEngine(ck, 3, EngineOptions(greedy=True, chunk_limit=CHUNK))
    rec = record_batched(engine)
    planned_on: list[str] = []
    plan = engine._plan

    def recorded_plan(options, mimi):
        planned_on.append(threading.current_thread().name)
        return plan(options, mimi)

    engine._plan = recorded_plan  # type: ignore[method-assign]
    long_options = EngineOptions(greedy=True, chunk_limit=CHUNK, input_queue_frames=64)
    j_options = {"J1": EngineOptions(greedy=True, chunk_limit=CHUNK, voice=str(voice),
                                     input_queue_frames=64),
                 "J2": long_options, "J3": long_options}
    j_pcm = {name: speech(seed, J_FRAMES) for seed, name in enumerate(j_options, start=2)}
    long_pcm = frames_of(speech(1, L_FRAMES))
    engine.start()
    engine.wait_ready(WAIT_S)
    talker = engine.open(long_options)
    assert talker is not None and talker.row == 0
    talker.start()
    joiners: dict = {}
    heard: list = []
    indices = []
    for i, frame in enumerate(long_pcm):
        assert talker.push_frame(frame, timeout=10)
        indices.append(_audio_index(talker.events, heard))
        if i == 3:  # J1 and J2 join while L talks
            for name in ("J1", "J2"):
                joiners[name] = engine.open(j_options[name])
                for chunk in frames_of(j_pcm[name]):
                    assert joiners[name].push_frame(chunk, timeout=10)
                joiners[name].finish_input()
                joiners[name].start()
        if i == 20:  # J1 has left (its input ended): J3 takes its row
            assert joiners["J1"].join(WAIT_S)
            joiners["J3"] = engine.open(j_options["J3"])
            assert joiners["J3"].row == joiners["J1"].row
            for chunk in frames_of(j_pcm["J3"]):
                assert joiners["J3"].push_frame(chunk, timeout=10)
            joiners["J3"].finish_input()
            joiners["J3"].start()
    talker.finish_input()
    for conversation in (talker, *joiners.values()):
        assert conversation.join(WAIT_S)
    assert engine.stop()

    # L: every frame back, in order, none lost or doubled.
    assert indices == list(range(L_FRAMES))
    heard += drain(talker.events)
    assert [e.frame_index for e in heard if isinstance(e, ev.AudioOut)] == indices
    # The voice recording was encoded on the planner's thread, not the engine's.
    assert planned_on and all(n.startswith("conversation-starts") for n in planned_on)
    # Every start went in pieces of at most the chunk limit, for its row alone, while L
    # was live: the start of 54 positions took at least 7 of them.
    assert engine.start_pieces >= 3 * 7
    rows = {name: j.row for name, j in joiners.items()}
    starts = [f for f in rec.forwards if f[0] == "row" and f[1] in rows.values()]
    assert starts and max(shape[-1] for _kind, _row, shape in starts) <= CHUNK
    # Each joiner's conversation is the one it has alone (its start read whole there).
    for name, index in (("J1", 0), ("J2", 0), ("J3", 1)):
        alone = run_alone(tiny_cs_folder, "tiny-cs", j_options[name], j_pcm[name], {})
        together = conversation_of(rec, rows[name], index)
        assert together.fed == alone.fed, name
        assert together.frames == alone.frames, name
        events = drain(joiners[name].events)
        assert comparable(events) == comparable(alone.events), name
