"""The reference's `/ws` as its own browser page uses it (docs/PROTOCOL.md of the Context
Spanning release): the page sends its
context after every `ready` and on every edit, clones a voice from a recording, and waits
for an answer to every `ret`. Here, from a script; tests/server/test_browser_page.py drives
the same flow from a real browser."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from app.checkpoints.catalog import get_manifest
from app.checkpoints.loader import load_checkpoint
from app.engine.speech_engine import EngineOptions
from app.server.engine_host import EngineHost
from app.server.event_mapping import NO_LLM_REASON
from app.wire import events as wire
from app.wire.client import AudioFrame, Disconnected, EngineClient
from tests.server.helpers import TOKEN, collect, of, run_server, tone, wait_until_free

FRAMES = 8
DEFAULT_PERSONA = "You are a wise and friendly teacher."  # tiny-cs's manifest


@pytest.fixture(scope="module")
def tiny_cs_host(tiny_cs_folder):
    checkpoint = load_checkpoint(get_manifest("tiny-cs"), tiny_cs_folder, device="cpu")
    # Random weights never ask: the model's <ret> is forced at frame 3 of each conversation.
    host = EngineHost(checkpoint, EngineOptions(seed=1, chunk_limit=16,
                                                forced_ret_frames=frozenset({3})))
    host.wait_warm()  # the engine warms once, when the server starts: busy until then
    yield host
    assert host.close(), "the host's engine did not stop"


def speech_like(seconds: float, seed: int = 0) -> np.ndarray:
    """A voiced stand-in for a user's recording: a gliding 120-180 Hz harmonic tone in
    syllables, light noise, float32 at 24 kHz."""
    rng = np.random.default_rng(seed)
    t = np.arange(round(seconds * 24000)) / 24000
    phase = 2 * np.pi * np.cumsum(150 + 30 * np.sin(2 * np.pi * 0.5 * t)) / 24000
    voiced = sum(np.sin(k * phase) / k for k in range(1, 10))
    syllables = np.clip(np.sin(2 * np.pi * 3.5 * t), 0, None)
    noise = 0.01 * rng.standard_normal(t.size)
    return (0.2 * voiced * syllables + noise).astype(np.float32)


async def _clone(client: EngineClient, pcm: np.ndarray) -> None:
    await client._ws.send_str(json.dumps({"type": "clone"}))
    await client._ws.send_bytes(pcm.astype("<f4").tobytes())


async def _talk(client: EngineClient) -> list:
    for i in range(FRAMES):
        await client.send_frame(tone(i))
    return await collect(client, lambda ev: len(of(AudioFrame, ev)) == FRAMES)


def _cloned(events: list) -> list[dict]:
    return [e.data for e in events if isinstance(e, wire.UnknownEvent) and e.type == "cloned"]


def test_a_context_that_changes_nothing_keeps_the_conversation(tiny_cs_host):
    """The page's first context carries the persona the `ready` announced: the conversation
    that is waiting is the one it asks for, so no second `ready` (the page would open a
    second microphone on it), and the same context during the talk is no error."""

    async def body(server, url):
        async with await EngineClient.connect(url, TOKEN) as client:
            await client.send_context(persona=client.ready.persona)
            first = await _talk(client)
            await client.send_context(persona=DEFAULT_PERSONA)  # an edit that changes nothing
            await client.send_context(persona=DEFAULT_PERSONA, name="Ada")  # a real change
            await client.send_frame(tone(FRAMES))
            late = await collect(client, lambda ev: of(wire.Error, ev) and of(AudioFrame, ev))
            return first, late, server.metrics.sessions["reference"]

    first, late, sessions = run_server(tiny_cs_host, body)
    assert not of(wire.Ready, first) and not of(wire.Error, first)
    assert [a.index for a in of(AudioFrame, first)] == list(range(FRAMES))
    assert sessions == 1  # one engine built for the connection
    errors = of(wire.Error, late)
    assert [(e.stage, "has started" in e.message) for e in errors] == [("persona", True)]
    assert not of(wire.Ready, late)


def test_a_cloned_voice_is_the_voice_the_conversation_starts_from(tiny_cs_host):
    """Same seed, same frames: the reply differs from the default voice's, and is the same
    again for the same recording; the answer is `cloned` with the prompt's frames, and no
    second `ready`."""
    recording = speech_like(3.0)

    async def conversation(url: str, clone: bool) -> tuple[list, list]:
        await wait_until_free(url)  # the last conversation's engine has stopped
        async with await EngineClient.connect(url, TOKEN) as client:
            setup: list = []
            if clone:
                await _clone(client, recording)
                setup = await collect(client, lambda ev: _cloned(ev))
            return setup, await _talk(client)

    async def body(server, url):
        return [await conversation(url, clone) for clone in (False, True, True)]

    (_, plain), (cloned_setup, cloned), (_, again) = run_server(tiny_cs_host, body)
    frames = math.ceil(recording.size / 1920)
    assert _cloned(cloned_setup) == [{"type": "cloned", "frames": frames,
                                      "seconds": round(frames * 0.08, 2)}]
    assert not of(wire.Ready, cloned_setup + cloned)
    assert not of(wire.Error, cloned_setup + cloned)

    def audio(events: list) -> np.ndarray:
        return np.concatenate([a.pcm for a in of(AudioFrame, events)])

    assert not np.array_equal(audio(plain), audio(cloned))
    np.testing.assert_array_equal(audio(cloned), audio(again))


def test_a_clone_that_cannot_be_taken_is_told_and_its_recording_is_no_frame(tiny_cs_host,
                                                                         tiny_host):
    """Too short, too long, after the first frame, or on a model without a voice prompt:
    an `error` at stage voice each; the recording never counts as a frame."""

    async def refused(url: str, pcm: np.ndarray, after_a_frame: bool = False) -> list:
        await wait_until_free(url)
        async with await EngineClient.connect(url, TOKEN) as client:
            if after_a_frame:
                await client.send_frame(tone(0))
                await collect(client, lambda ev: of(AudioFrame, ev))
            await _clone(client, pcm)
            await client.send_frame(tone(1))
            return await collect(client, lambda ev: of(AudioFrame, ev) and of(wire.Error, ev))

    async def on_tiny_cs(server, url):
        return [await refused(url, speech_like(1.0)), await refused(url, speech_like(31.0)),
                await refused(url, speech_like(3.0), after_a_frame=True)]

    async def on_tiny(server, url):
        return await refused(url, speech_like(3.0))

    short, long, late = run_server(tiny_cs_host, on_tiny_cs)
    no_voice = run_server(tiny_host, on_tiny)
    messages = [" ".join(e.message for e in of(wire.Error, events))
                for events in (short, long, late, no_voice)]
    assert "at least 2 s" in messages[0] and "at most 30 s" in messages[1]
    assert "has started" in messages[2] and "tiny takes no voice" in messages[3]
    for events in (short, long, late, no_voice):
        assert {e.stage for e in of(wire.Error, events)} == {"voice"}
        assert not _cloned(events) and not of(Disconnected, events)
    assert [a.index for a in of(AudioFrame, no_voice)] == [0]  # the recording took no index


def test_a_ret_on_a_server_without_an_llm_is_answered_no_span(tiny_cs_host):
    async def body(server, url):
        async with await EngineClient.connect(url, TOKEN) as client:
            return await _talk_until(client, lambda ev: of(wire.NoSpan, ev))

    events = run_server(tiny_cs_host, body)
    kinds = [type(e) for e in events if isinstance(e, (wire.Ret, wire.NoSpan))]
    assert kinds == [wire.Ret, wire.NoSpan]
    assert of(wire.NoSpan, events)[0].reason == NO_LLM_REASON


async def _talk_until(client: EngineClient, also) -> list:
    for i in range(FRAMES):
        await client.send_frame(tone(i))
    return await collect(client, lambda ev: also(ev) and len(of(AudioFrame, ev)) == FRAMES)
