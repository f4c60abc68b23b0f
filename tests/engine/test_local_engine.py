"""The engine thread, for one conversation (a one-row engine of its own): frames in, frames
and text out, spans between frames, clean stop."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from app.checkpoints.catalog import get_manifest
from app.checkpoints.loader import load_checkpoint
from app.engine import events as ev
from app.engine.local_engine import LocalEngine, open_conversation
from app.engine.row_conversation import RowConversation
from app.engine.speech_engine import EngineOptions
from app.frames import FRAME_SAMPLES
from tests.queues import drain


def _run(engine: RowConversation, frames: int, timeout: float = 60.0) -> list:
    engine.start()
    rng = np.random.default_rng(0)
    for _ in range(frames):
        assert engine.push_frame((0.05 * rng.standard_normal(FRAME_SAMPLES)).astype(np.float32), 10)
    engine.finish_input()
    assert engine.join(timeout), "the engine thread did not end"
    return drain(engine.events)


def of(kind, events):
    return [e for e in events if isinstance(e, kind)]


def test_one_output_frame_per_input_frame_with_text_and_stats(tiny_checkpoint):
    engine = open_conversation(tiny_checkpoint, EngineOptions(seed=1, chunk_limit=64))
    events = _run(engine, 30)
    audio = of(ev.AudioOut, events)
    assert [a.frame_index for a in audio] == list(range(30))
    assert all(a.pcm.shape == (FRAME_SAMPLES,) and a.pcm.dtype == np.float32 for a in audio)
    assert np.abs(np.concatenate([a.pcm for a in audio[2:]])).max() > 0  # the model speaks
    texts = of(ev.TextPiece, events)
    assert texts and all(0 < t.frame_index < 30 and t.text for t in texts)
    ready = of(ev.EngineReady, events)[0]
    assert ready.model_id == "tiny" and ready.chunk_limit == 64 and ready.context_window == 375
    stats = of(ev.FrameStats, events)
    assert stats[-1].context.frame_positions == 30
    assert of(ev.EngineStopped, events)[-1].reason == "end of input"
    assert not of(ev.EngineError, events)


def test_spans_land_before_the_frame_asked_for_and_count_in_the_context(tiny_checkpoint):
    engine = open_conversation(tiny_checkpoint, EngineOptions(seed=1, chunk_limit=16))
    first = engine.inject("the capital of australia is canberra", "search", at_frame=5)
    second = engine.inject("word " * 400, "file", at_frame=10)
    events = _run(engine, 40)
    chunks = of(ev.SpanChunkInjected, events)
    first_chunks = [c for c in chunks if c.span_id == first]
    assert first_chunks[0].before_frame == 5
    accepted = {a.span_id: a for a in of(ev.SpanAccepted, events)}
    assert accepted[second].truncated and accepted[second].tokens == 128  # the manifest's max
    second_chunks = [c for c in chunks if c.span_id == second]
    assert second_chunks[0].before_frame >= 10
    assert [c.k for c in second_chunks] == [16] * 8
    frames = [c.before_frame for c in second_chunks]
    assert frames == list(range(frames[0], frames[0] + 8))  # consecutive frames
    total = sum(c.k for c in chunks)
    assert of(ev.FrameStats, events)[-1].context.span_positions == total
    assert {s.span_id for s in of(ev.SpanInjected, events)} == {first, second}


def test_measures_its_chunk_budget_when_not_given(tiny_checkpoint):
    engine = open_conversation(tiny_checkpoint, EngineOptions(seed=1))
    events = _run(engine, 3)
    ready = of(ev.EngineReady, events)[0]
    assert ready.step_ms is not None and ready.step_ms > 0
    assert 1 <= ready.chunk_limit <= 256
    assert engine.engine.budget is not None and set(engine.engine.budget.prefill_ms) >= {1, 256}


def test_stop_ends_the_thread_and_a_new_engine_starts_after_it(tiny_checkpoint):
    engine = open_conversation(tiny_checkpoint, EngineOptions(seed=1, chunk_limit=8))
    engine.start()
    assert engine.ready.wait(30)
    for _ in range(3):
        engine.push_frame(np.zeros(FRAME_SAMPLES, np.float32), 5)
    assert engine.stop(10)
    assert not engine.running
    again = open_conversation(tiny_checkpoint, EngineOptions(seed=1, chunk_limit=8))
    events = _run(again, 5)
    assert len(of(ev.AudioOut, events)) == 5 and not of(ev.EngineError, events)


def test_same_seed_same_reply(tiny_checkpoint):
    replies = []
    for _ in range(2):
        engine = open_conversation(tiny_checkpoint, EngineOptions(seed=7, chunk_limit=32))
        engine.inject("hello there", "test", at_frame=3)
        events = _run(engine, 12)
        replies.append(np.concatenate([a.pcm for a in of(ev.AudioOut, events)]))
    assert np.array_equal(replies[0], replies[1])


def test_wrong_frame_size_is_refused(tiny_checkpoint):
    engine = open_conversation(tiny_checkpoint, EngineOptions(chunk_limit=8))
    with pytest.raises(ValueError, match="1920"):
        engine.push_frame(np.zeros(100, np.float32))


def test_persona_checkpoint_starts_with_its_voice_and_role_prompts(tiny_folder: Path):
    from app.engine.conversation_start import persona_ids

    checkpoint = load_checkpoint(get_manifest("tiny-persona"), tiny_folder, device="cpu")
    engine = open_conversation(checkpoint, EngineOptions(seed=1, chunk_limit=32,
                                                    role="You are a teacher."))
    events = _run(engine, 5)
    ready = of(ev.EngineReady, events)[0]
    start = checkpoint.manifest.conversation_start
    role_ids = persona_ids(checkpoint.tokenizer, start, "You are a teacher.", frozenset())
    voice_frames = -(-int(1.6 * 24000) // FRAME_SAMPLES)  # the tiny voice prompt is 1.6 s
    assert ready.prompt_frames == voice_frames + 2 * 2 + len(role_ids)
    # Every forced frame but the first (which only seeds the ring) is a context position.
    assert of(ev.FrameStats, events)[-1].context.frame_positions == ready.prompt_frames - 1 + 5
    assert len(of(ev.AudioOut, events)) == 5


def test_persona_role_text_reaches_the_models_text_stream(tiny_folder: Path):
    """The forced role tokens are what the model's own text stream holds afterwards."""
    from contextlib import ExitStack

    from app.engine.conversation_start import persona_ids, plan_start

    checkpoint = load_checkpoint(get_manifest("tiny-persona"), tiny_folder, device="cpu")
    start = checkpoint.manifest.conversation_start
    engine = LocalEngine(checkpoint, 1, EngineOptions(greedy=True))
    engine.prepare_placeholders()
    assert engine.placeholders is not None
    plan = plan_start(checkpoint.manifest, tiny_folder, checkpoint.mimi, checkpoint.tokenizer,
                      engine.placeholders, 3, frozenset(), voice=None, persona="be kind")
    role_ids = persona_ids(checkpoint.tokenizer, start, "be kind", frozenset())
    seen = []
    with ExitStack() as streaming:
        streaming.enter_context(engine.runtime.streaming(1, 8))
        for step in plan.steps:  # one forced frame at a time, through the engine's step
            out = engine.step_rows([0], np.asarray([step.user]), [step.text], [step.agent])[0]
            if out is not None:
                seen.append(int(out[0]))
    # The step output lags the ring by one frame: the last role token appears after it.
    joined = ",".join(map(str, seen))
    assert ",".join(map(str, role_ids[:-1])) in joined


def test_a_failure_on_the_engine_thread_is_reported_not_swallowed(tiny_folder: Path):
    checkpoint = load_checkpoint(get_manifest("tiny-persona"), tiny_folder, device="cpu")
    engine = open_conversation(checkpoint, EngineOptions(chunk_limit=8, voice="NO-SUCH-VOICE"))
    engine.start()
    assert engine.join(30)
    events = drain(engine.events)
    errors = of(ev.EngineError, events)
    assert errors and errors[0].fatal and "NO-SUCH-VOICE" in errors[0].message
    assert of(ev.EngineStopped, events)[-1].reason == "error"
    assert not of(ev.EngineReady, events)


def test_a_forced_ret_comes_out_as_a_ret_event_never_as_a_word(tiny_cs_checkpoint):
    engine = open_conversation(tiny_cs_checkpoint, EngineOptions(
        seed=1, greedy=True, chunk_limit=8, forced_ret_frames=frozenset({5, 12})))
    events = _run(engine, 20)
    # The text forced into frame 5's target column comes out with the next frame.
    assert 6 in [e.frame_index for e in of(ev.RetToken, events)]
    assert 13 in [e.frame_index for e in of(ev.RetToken, events)]
    assert not [e for e in of(ev.TextPiece, events) if e.token_id in (4, 12, 13)]
    assert len(of(ev.AudioOut, events)) == 20


def test_forcing_ret_on_a_model_that_never_asks_is_refused(tiny_checkpoint):
    with pytest.raises(ValueError, match="does not ask with <ret>"):
        open_conversation(tiny_checkpoint, EngineOptions(forced_ret_frames=frozenset({3})))


def test_a_span_offered_after_the_conversation_ended_is_refused(tiny_checkpoint):
    from app.engine.speech_engine import EngineStoppedError

    engine = open_conversation(tiny_checkpoint, EngineOptions(chunk_limit=8))
    engine.inject("before the start is fine", "test")  # queued for the first frame
    _run(engine, 2)
    with pytest.raises(EngineStoppedError, match="not injected"):
        engine.inject("too late", "test")


def test_every_padded_size_is_met_before_the_first_frame(tiny_checkpoint, monkeypatch):
    """On a GPU a span's forward is padded to one of a few sizes, each CUDA-graphed on its
    second use: the warm-up uses every size up to the chunk limit's twice, so no capture (or
    first-call slowness) lands in the frame loop."""
    from app.engine import position_forwards

    seen: list[tuple[int, bool]] = []
    original = position_forwards.PositionForwards.__call__

    def recording(self, codes, *args):
        seen.append((codes.shape[-1], engine.ready.is_set()))
        return original(self, codes, *args)

    monkeypatch.setattr(position_forwards.PositionForwards, "__call__", recording)
    engine = open_conversation(tiny_checkpoint, EngineOptions(chunk_limit=40, seed=1))
    _run(engine, 2)
    before = [n for n, ready in seen if not ready]
    for size in position_forwards.warmup_sizes(40):
        assert before.count(size) >= 2, (size, before)
    # 40 is read as 40 (padded to 64 on a GPU): no read longer than the chunk limit
    assert position_forwards.warmup_sizes(40) == [16, 32, 40]
    assert max(before) == 40
