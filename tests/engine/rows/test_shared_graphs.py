"""The reads of every row share one set of CUDA graphs (issue 33): an engine of 64 rows holds
as many graphs as an engine of one, and a row's span read on the shared copy of the state
is the one-row engine's, column for column.

On this CPU the GPU's code path is forced: reads padded to the graphed sizes, each size's
graph counted (moshi's CUDAGraphed, disabled off CUDA) instead of captured. Before issue 33
each row had its own graph per size (672 graphs at 48 rows on the H200, which ran out of
memory); here the count is the same at 1 and 64 rows.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from app.engine import events as ev
from app.engine.lm_runtime import Sampling
from app.engine.local_engine import LocalEngine
from app.engine.speech_engine import EngineOptions
from app.engine.torch_runtime import TorchRuntime
from tests.engine.rows.recording import drain, frames_of, load, speech

CHUNK = 40  # reads of up to 40 positions: padded sizes 16, 32 and 64
SPAN = "the river rises in the northern hills and runs south past seven old towns"
FRAMES = 10
WAIT_S = 600.0


def _padded_engine(ck, rows: int) -> LocalEngine:
    engine = LocalEngine(replace(ck), rows, EngineOptions(greedy=True, chunk_limit=CHUNK),
                         batched_mimi=False)
    engine.runtime = TorchRuntime(ck.lm, Sampling(greedy=True), padded=True)
    return engine


def _converse(engine: LocalEngine, row_wanted: int) -> list:
    """A conversation with a span on row `row_wanted` of the engine (the rows before it
    held by conversations that never start)."""
    holders = [engine.open() for _ in range(row_wanted)]
    conversation = engine.open(EngineOptions(greedy=True, chunk_limit=CHUNK,
                                             input_queue_frames=64))
    assert conversation is not None and conversation.row == row_wanted
    conversation.inject(SPAN, "test", at_frame=3)
    for frame in frames_of(speech(7, FRAMES)):
        assert conversation.push_frame(frame, timeout=60)
    conversation.finish_input()
    conversation.start()
    assert conversation.join(WAIT_S)
    for holder in holders:
        assert holder is not None
        holder.stop(0.0)
    return drain(conversation.events)


def _tokens(events: list) -> tuple[list, list]:
    text = [(e.frame_index, e.token_id) for e in events if isinstance(e, ev.TextPiece)]
    audio = [e.pcm for e in events if isinstance(e, ev.AudioOut)]
    return text, audio


def test_one_set_of_graphs_for_1_or_64_rows_and_a_far_row_reads_as_one_alone(tiny_folder):
    counts = {}
    results = {}
    for rows, row in ((1, 0), (64, 63)):
        ck = load(tiny_folder, "tiny")
        engine = _padded_engine(ck, rows)
        engine.start()
        engine.wait_ready(WAIT_S)
        warm = engine.graph_count()
        results[rows] = _converse(engine, row)
        after = engine.graph_count()
        assert after == warm  # a conversation's span on any row captures nothing new
        counts[rows] = warm
        assert engine.stop()
    one, many = counts[1], counts[64]
    assert (one.step, one.reads) == (many.step, many.reads) == (2, 3)  # 16, 32, 64
    assert one.scratch_bytes == 0 and many.scratch_bytes > 0  # 64 rows: one shared copy
    landed = [e for e in results[64] if isinstance(e, ev.SpanInjected)]
    assert landed and landed[0].first_frame == 3
    text_one, audio_one = _tokens(results[1])
    text_many, audio_many = _tokens(results[64])
    assert text_many == text_one
    assert len(audio_many) == len(audio_one) == FRAMES
    for a, b in zip(audio_many, audio_one, strict=True):
        np.testing.assert_array_equal(a, b)
