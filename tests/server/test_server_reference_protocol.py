"""The reference's `/ws`, driven by our client library as its description reads: ready ->
frames -> a span the client sends lands (its frames and prefill time come back) -> reset ->
a new conversation; context and voice apply before the first frame only."""

from __future__ import annotations

import asyncio

import pytest

from app.checkpoints.catalog import get_manifest
from app.checkpoints.loader import load_checkpoint
from app.engine.speech_engine import EngineOptions
from app.server.engine_host import EngineHost
from app.wire import events as wire
from app.wire.client import AudioFrame, Disconnected, EngineClient
from tests.server.helpers import TOKEN, collect, of, run_server, tone

SPAN = "the capital of australia is canberra"


def test_ready_frames_span_then_reset(tiny_host):
    frames = 6

    async def body(server, url):
        async with await EngineClient.connect(url, TOKEN) as client:
            ready = client.ready
            assert (ready.sample_rate, ready.frame_size, ready.model) == (24000, 1920, "tiny")
            assert ready.conversation == 1 and ready.chunk_limit == 16
            span_id = await client.send_span(SPAN, "notes")
            for i in range(frames):
                await client.send_frame(tone(i))
            events = await collect(client, lambda ev: len(of(AudioFrame, ev)) == frames
                                   and of(wire.Span, ev))
            await client.reset()
            again = await collect(client, lambda ev: of(wire.Ready, ev))
            for i in range(2):
                await client.send_frame(tone(i))
            after = await collect(client, lambda ev: len(of(AudioFrame, ev)) == 2)
            return events, again, after, span_id

    events, again, after, span_id = run_server(tiny_host, body)
    audio = of(AudioFrame, events)
    assert [a.index for a in audio] == list(range(frames))
    assert all(a.pcm.shape == (1920,) and a.rtt_ms is not None and a.rtt_ms > 0 for a in audio)
    queued = of(wire.SpanQueued, events)[0]
    assert (queued.id, queued.source) == (span_id, "notes")
    accepted = of(wire.SpanAccepted, events)[0]
    landed = of(wire.Span, events)[0]
    assert landed.span_id == accepted.span_id == queued.span_id
    assert landed.text == SPAN and landed.source == "notes"
    assert landed.frames == accepted.tokens > 0 and landed.seconds == round(landed.frames / 12.5, 2)
    assert landed.prefill_ms > 0 and 0 <= landed.landed_frame < frames
    assert not of(wire.Error, events) and not of(Disconnected, events)
    ready = of(wire.Ready, again)[-1]
    assert ready.conversation == 2 and ready.frames_received == frames
    assert [a.index for a in of(AudioFrame, after)] == [frames, frames + 1]


def test_context_before_the_first_frame_restarts_after_it_is_refused(tiny_host):
    async def body(server, url):
        async with await EngineClient.connect(url, TOKEN) as client:
            await client.send_context(name="Ada", city="Lyon")
            first = await collect(client, lambda ev: of(wire.Ready, ev))
            await client.send_context(persona="You are a pirate.")
            second = await collect(client, lambda ev: of(wire.Ready, ev))
            await client.send_frame(tone(0))
            await collect(client, lambda ev: of(AudioFrame, ev))
            await client.send_context(name="Bob")
            await client.send_voice("f0")
            late = await collect(client, lambda ev: len(of(wire.Error, ev)) == 2)
            return first, second, late

    first, second, late = run_server(tiny_host, body)
    assert of(wire.Ready, first)[0].conversation == 2
    refused = of(wire.Error, second)
    assert refused and refused[0].stage == "persona" and "takes no persona" in refused[0].message
    assert of(wire.Ready, second)[0].conversation == 3
    assert [(e.stage, "started" in e.message) for e in of(wire.Error, late)] == [
        ("persona", True), ("voice", True)]


@pytest.fixture(scope="module")
def tiny_cs_host(tiny_cs_folder):
    checkpoint = load_checkpoint(get_manifest("tiny-cs"), tiny_cs_folder, device="cpu")
    # Random weights never ask: the model's <ret> is forced at frame 3.
    host = EngineHost(checkpoint, EngineOptions(seed=1, forced_ret_frames=frozenset({3})))
    host.wait_warm()
    yield host
    assert host.close(), "the host's engine did not stop"


def test_voice_ret_and_span_block_slot_on_a_span_checkpoint(tiny_cs_host):
    async def body(server, url):
        async with await EngineClient.connect(url, TOKEN) as client:
            assert client.ready.persona == "You are a wise and friendly teacher."
            await client.send_voice("nobody")
            await client.send_voice("m0")
            chosen = await collect(client, lambda ev: of(wire.Ready, ev))
            for i in range(6):
                await client.send_frame(tone(i))
            await collect(client, lambda ev: len(of(AudioFrame, ev)) >= 2)
            await client.send_span(SPAN, "router")
            events = await collect(client, lambda ev: of(wire.Slot, ev)
                                   and len(of(AudioFrame, ev)) >= 4)
            return chosen, events

    chosen, events = run_server(tiny_cs_host, body)
    error = of(wire.Error, chosen)[0]
    assert error.stage == "voice" and "m0" in error.message  # the voices on offer are named
    assert of(wire.Voice, chosen)[0].name == "m0"
    assert of(wire.Ready, chosen)[0].conversation == 2
    rets = of(wire.Ret, events)
    assert len(rets) == 1 and rets[0].frame >= 3  # forced at 3, out with that frame's text
    landed, slot = of(wire.Span, events)[0], of(wire.Slot, events)[0]
    assert slot.span_id == landed.span_id and landed.chunks == 1  # a block is never split
    assert slot.prefill_ms > 0 and slot.total_ms >= slot.prefill_ms


def test_the_client_reports_a_dropped_connection_as_an_event(tiny_host):
    async def body(server, url):
        client = await EngineClient.connect(url, TOKEN)
        await server.stop()  # the server goes away mid-conversation
        event = await client.receive(timeout=30)
        while not isinstance(event, Disconnected):
            event = await client.receive(timeout=30)
        again = await client.receive(timeout=1)
        await client.close()
        return event, again

    event, again = run_server(tiny_host, body)
    assert not event.by_client and isinstance(again, Disconnected)


def test_a_refused_frame_is_named_so_round_trips_stay_matched(tiny_host):
    async def body(server, url):
        async with await EngineClient.connect(url, TOKEN) as client:
            await client.send_frame(tone(0))
            await client.send_raw(b"\x00" * 100)  # frame 1: refused
            await client.send_frame(tone(2))
            return await collect(client, lambda ev: len(of(AudioFrame, ev)) == 2)

    events = run_server(tiny_host, body)
    assert [a.index for a in of(AudioFrame, events)] == [0, 2]
    assert of(wire.Error, events)[0].frame == 1


def test_wrong_token_and_no_token_are_unauthorized(tiny_host):
    from app.wire.client import Unauthorized

    async def body(server, url):
        for token in (None, "wrong"):
            with pytest.raises(Unauthorized):
                await EngineClient.connect(url, token)
        await asyncio.sleep(0)
        return True

    assert run_server(tiny_host, body)
