"""One recogniser for several conversations: ONE model, one batched step a frame, and each
conversation's words, partials and finals the same as recognising it alone.

Three rows, four conversations with their own audio: A and B talk all along, C leaves
early, D joins later into the row C freed. The end-of-speech threshold 0 ends a turn after
each word, so turns end (and flush the model's delayed words, for their row alone) at
different frames in different rows."""

from __future__ import annotations

import queue

import numpy as np
import pytest
import torch

from app.asr.asr_thread import AsrOptions, StreamingAsr
from app.asr.events import AsrError
from app.asr.recogniser import Recogniser

OPTIONS = AsrOptions(eos_threshold=0.0, input_queue_frames=64)
CONVERSATIONS = {"A": (1, 40), "B": (2, 40), "C": (3, 12), "D": (4, 20)}  # seed, frames


@pytest.fixture(autouse=True)
def one_torch_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _audio(seed: int, frames: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [(0.1 * rng.standard_normal(1920)).astype(np.float32) if (i // 7) % 3 != 2
            else np.zeros(1920, np.float32) for i in range(frames)]


def _drain(events: queue.SimpleQueue) -> list:
    out = []
    while not events.empty():
        out.append(events.get_nowait())
    return out


def _alone(stt, seed: int, frames: int) -> list:
    asr = StreamingAsr(stt, OPTIONS)
    asr.start()
    for pcm in _audio(seed, frames):
        assert asr.push_frame(pcm, timeout=30)
    asr.finish_input()
    assert asr.join(300)
    return _drain(asr.events)


def test_each_conversation_hears_what_it_would_alone(tiny_stt):
    recogniser = Recogniser(tiny_stt, 3)
    recogniser.start()
    try:
        assert recogniser.ready.wait(120)
        asrs = {name: recogniser.open(OPTIONS) for name in "ABC"}
        assert recogniser.open(OPTIONS) is None  # three rows, all held
        assert all(asr is not None for asr in asrs.values())
        for name, asr in asrs.items():
            assert asr is not None
            seed, frames = CONVERSATIONS[name]
            for pcm in _audio(seed, frames):
                assert asr.push_frame(pcm, timeout=30)
            asr.start()
        c = asrs["C"]
        assert c is not None
        c.finish_input()
        assert c.join(300)  # C's row is free: D takes it
        d = recogniser.open(OPTIONS)
        assert d is not None and d.row == c.row
        seed, frames = CONVERSATIONS["D"]
        for pcm in _audio(seed, frames):
            assert d.push_frame(pcm, timeout=30)
        d.start()
        asrs["D"] = d
        for name in "ABD":
            asr = asrs[name]
            assert asr is not None
            asr.finish_input()
            assert asr.join(300), name
        shared = {name: _drain(asr.events) for name, asr in asrs.items() if asr is not None}
        steps = recogniser.ticks
    finally:
        recogniser.stop(30)
    total = sum(frames for _seed, frames in CONVERSATIONS.values())
    assert steps < total  # frames of several conversations shared a step
    for name, (seed, frames) in CONVERSATIONS.items():
        events = shared[name]
        assert not [e for e in events if isinstance(e, AsrError)], events
        assert events, name
        assert events == _alone(tiny_stt, seed, frames), name


def test_a_conversation_stopped_before_it_started_frees_its_row(tiny_stt):
    recogniser = Recogniser(tiny_stt, 1)
    recogniser.start()
    try:
        assert recogniser.ready.wait(120)
        first = recogniser.open(OPTIONS)
        assert first is not None and recogniser.open(OPTIONS) is None
        assert first.stop(10)
        assert recogniser.free_rows == 1
        second = recogniser.open(OPTIONS)
        assert second is not None and second.row == 0
    finally:
        recogniser.stop(30)


def test_a_stream_closed_after_the_callers_no_grad_leaves_grad_mode_as_it_was(tiny_stt):
    """A one-row stream started inside a caller's no_grad and closed after it (a `finally`
    outside the `with`) must not leave the thread's autograd off: training in the same
    process would then fail on backward."""
    from app.asr.kyutai_stt import KyutaiStreamingStt

    stream = KyutaiStreamingStt(tiny_stt)
    with torch.no_grad():
        stream.start()
        stream.step(np.zeros(1920, np.float32))
    stream.close()
    assert torch.is_grad_enabled()


def test_a_recogniser_started_while_the_last_one_still_streams_its_model_waits_its_turn(
        tiny_stt):
    """Conversations one after another on ONE loaded model (eval fdb3's samples): the next
    one's recogniser may start while the last one's winds down, still streaming the model's
    modules. It waits for them, then hears its own audio as it would alone; before, it
    failed at once ("already streaming"), and its sample had no speech recognition."""
    seed, frames = CONVERSATIONS["B"]
    last = StreamingAsr(tiny_stt, OPTIONS)
    last.start()
    for pcm in _audio(*CONVERSATIONS["A"]):
        assert last.push_frame(pcm, timeout=30)
    assert last.wait_frames(CONVERSATIONS["A"][1], 300)  # streaming the model now
    following = StreamingAsr(tiny_stt, OPTIONS)
    following.start()
    for pcm in _audio(seed, frames)[:5]:
        assert following.push_frame(pcm, timeout=30)
    assert not following.wait_frames(1, 0.5)  # waits while the last one streams
    assert last.stop(60)
    for pcm in _audio(seed, frames)[5:]:
        assert following.push_frame(pcm, timeout=60)
    following.finish_input()
    assert following.join(300)
    heard = _drain(following.events)
    assert not [e for e in heard if isinstance(e, AsrError)], heard
    assert heard and heard == _alone(tiny_stt, seed, frames)
