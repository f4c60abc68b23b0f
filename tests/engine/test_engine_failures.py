"""The engine's own failure says why, at once, to every waiter (issue 33).

A fault is put into the real engine's step (the tiny model's torch runtime, everything else
as users run it): a warm-up that runs out of memory, a step that raises on the 5th frame of
a conversation, and a step that hangs. Each time every waiter ends within seconds with the
reason (the exception's type and message): `wait_ready`, `open`, and the conversations
already on the engine (an EngineError naming it, then EngineStopped "error"). Nobody waits
for a `ready` that will never come.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from app.engine import events as ev
from app.engine.local_engine import LocalEngine, open_conversation
from app.engine.speech_engine import EngineOptions
from app.frames import FRAME_SAMPLES
from app.row_host import HostFailedError
from tests.engine.step_fault import WAIT_S, StepFault, events_until

OOM = "CUDA out of memory. Tried to allocate 2.00 GiB"


def _talk(conversation, frames: int) -> None:
    for _ in range(frames):
        conversation.push_frame(np.zeros(FRAME_SAMPLES, np.float32), timeout=10)


def test_a_warm_up_out_of_memory_ends_every_waiter_with_the_reason(tiny_checkpoint):
    engine = LocalEngine(tiny_checkpoint, 2, EngineOptions(chunk_limit=8))
    StepFault(engine, 1, torch.OutOfMemoryError(OOM), warm_up=True)
    waiting = engine.open()  # opened before the engine started: it waits for the warm-up
    assert waiting is not None
    waiting.start()  # asks to join: it waits for the warm-up
    engine.start()
    with pytest.raises(HostFailedError, match="out of memory. Tried to allocate 2.00 GiB"):
        engine.wait_ready(WAIT_S)  # ends at once with the reason, not after WAIT_S
    assert engine.failure == f"OutOfMemoryError: {OOM}"
    seen = events_until(waiting.events, ev.EngineStopped)
    errors = [e for e in seen if isinstance(e, ev.EngineError)]
    assert errors and errors[0].fatal and OOM in errors[0].message
    assert seen[-1].reason == "error"
    assert not [e for e in seen if isinstance(e, ev.EngineReady)]
    with pytest.raises(HostFailedError, match="the speech engine failed: OutOfMemoryError"):
        engine.open()
    assert engine.join(WAIT_S)


def test_a_step_that_raises_mid_conversation_tells_every_conversation_why(tiny_checkpoint):
    engine = LocalEngine(tiny_checkpoint, 2, EngineOptions(chunk_limit=8))
    fault = StepFault(engine, 5, RuntimeError("CUDA error: an illegal memory access"))
    first, second = engine.open(), engine.open()
    assert first is not None and second is not None
    engine.start()
    engine.wait_ready(WAIT_S)
    first.start()
    second.start()
    _talk(first, 8)
    _talk(second, 8)
    for conversation in (first, second):
        seen = events_until(conversation.events, ev.EngineStopped)
        errors = [e for e in seen if isinstance(e, ev.EngineError)]
        assert errors and "illegal memory access" in errors[0].message, seen[-3:]
        assert seen[-1].reason == "error"
        frames = [e for e in seen if isinstance(e, ev.AudioOut)]
        assert len(frames) == 4  # the 5th step was the fault: four frames came back
    assert fault.calls == 5
    assert engine.join(WAIT_S) and engine.finished.is_set()
    assert engine.failure == "RuntimeError: CUDA error: an illegal memory access"
    with pytest.raises(HostFailedError, match="illegal memory access"):
        engine.wait_ready(0.0)  # a late waiter learns it at once too


def test_a_step_that_hangs_is_found_by_the_watchdog(tiny_checkpoint):
    engine = LocalEngine(tiny_checkpoint, 1, EngineOptions(chunk_limit=8, stall_s=1.0))
    fault = StepFault(engine, 3, None)
    conversation = engine.open()
    assert conversation is not None
    engine.start()
    engine.wait_ready(WAIT_S)
    conversation.start()
    _talk(conversation, 6)
    try:
        assert fault.hanging.wait(WAIT_S)
        seen = events_until(conversation.events, ev.EngineStopped)
        errors = [e for e in seen if isinstance(e, ev.EngineError)]
        assert errors and "StallError: a step made no progress" in errors[0].message
        assert seen[-1].reason == "error"
        assert engine.failure is not None and engine.failure.startswith("StallError")
        assert engine.running  # its thread is still stuck in the step: only a new process
        with pytest.raises(HostFailedError, match="StallError"):
            engine.open()
    finally:
        fault.release.set()
    assert engine.join(WAIT_S)


def test_a_desktop_conversation_hears_the_reason_of_its_engine_s_failure(tiny_checkpoint):
    """The desktop's and `run`'s one-row engine of its own: the same, through its face."""
    conversation = open_conversation(tiny_checkpoint, EngineOptions(chunk_limit=8))
    StepFault(conversation.engine, 3, torch.OutOfMemoryError(OOM))
    conversation.start()
    _talk(conversation, 5)
    seen = events_until(conversation.events, ev.EngineStopped)
    errors = [e for e in seen if isinstance(e, ev.EngineError)]
    assert errors and errors[0].fatal and OOM in errors[0].message
    assert conversation.join(WAIT_S)


def test_an_engine_waits_for_the_last_one_on_its_checkpoint_to_let_it_go(tiny_checkpoint):
    """Two engines on one loaded checkpoint (eval's samples, a restart): the model's modules
    keep one stream's state, so the second waits for the first to stop instead of failing
    with moshi's 'already streaming'."""
    first = LocalEngine(tiny_checkpoint, 1, EngineOptions(chunk_limit=8))
    first.start()
    first.wait_ready(WAIT_S)
    second = LocalEngine(tiny_checkpoint, 1, EngineOptions(chunk_limit=8))
    second.start()
    with pytest.raises(HostFailedError, match="was not ready after 1 s"):
        second.wait_ready(1.0)  # waiting for the model, not failed
    assert second.failure is None
    assert first.stop()
    second.wait_ready(WAIT_S)  # the first let it go: the second streams it now
    conversation = second.open()
    assert conversation is not None
    conversation.start()
    _talk(conversation, 3)
    seen = events_until(conversation.events, ev.AudioOut)
    assert seen and not [e for e in seen if isinstance(e, ev.EngineError)]
    assert second.stop()
