"""Opus on the reference's `/ws`, asked for by the client (`audio_codec`), so the reference's
own page (PCM, never asks) and moshi's client (`/api/chat`, tests/server) see no change:
the codec's rules, then our client against `serve`'s server on the tiny model, then our
client against a server that does not know the request (an older `serve`)."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest
from aiohttp import web

from app.frames import FRAME_SAMPLES
from app.server.codec import Frame
from app.server.reference_codec import FRAME_BYTES, ReferenceCodec
from app.server.wire_socket import Incoming
from app.wire import events as wire
from app.wire.client import AudioFrame, EngineClient
from app.wire.opus import OpusFrameReader, OpusFrameWriter
from tests.server.helpers import TOKEN, collect, of, run_server, tone

ASK_OPUS = wire.encode_request(wire.AudioCodecRequest(wire.OPUS))


def _voice(index: int) -> np.ndarray:
    """A voiced, wavering tone: something Opus spends bits on, unlike silence."""
    t = (np.arange(FRAME_SAMPLES) + index * FRAME_SAMPLES) / 24000
    return (0.3 * np.sin(2 * np.pi * (180 + 40 * np.sin(2 * np.pi * 3 * t)) * t)).astype(
        np.float32)


def test_a_codec_never_asked_speaks_pcm_both_ways():
    codec = ReferenceCodec()
    pcm = tone(0)
    decoded = codec.decode(Incoming("binary", pcm.astype("<f4").tobytes()))
    assert isinstance(decoded[0], Frame) and np.array_equal(decoded[0].pcm, pcm)
    out = codec.audio(pcm)
    assert out == [pcm.astype("<f4").tobytes()] and len(out[0]) == FRAME_BYTES
    assert codec.audio_codec == wire.PCM


def test_asked_for_opus_it_answers_before_its_first_opus_audio_and_takes_both():
    codec = ReferenceCodec()
    assert codec.decode(Incoming("text", ASK_OPUS)) == []  # never reaches the conversation
    # A PCM frame sent before the client heard the answer is still a frame...
    first = codec.decode(Incoming("binary", tone(0).astype("<f4").tobytes()))
    assert isinstance(first[0], Frame) and first[0].index == 0
    # ...and each message of one frame's Opus pages is the next frame.
    writer = OpusFrameWriter()
    heard = []
    for i in range(1, 7):
        decoded = codec.decode(Incoming("binary", writer.pages(_voice(i))))
        assert [type(item) for item in decoded] == [Frame] and decoded[0].index == i
        heard.append(decoded[0].pcm)
    sent, got = np.concatenate([_voice(i) for i in range(1, 7)]), np.concatenate(heard)
    # The same sound, a few milliseconds later (Opus's own delay: app/server/bench.py).
    lag = max(range(480), key=lambda d: float(np.dot(sent[: len(sent) - d], got[d:])))
    assert np.corrcoef(sent[: len(sent) - lag], got[lag:])[0, 1] > 0.7
    out = codec.audio(_voice(8))
    assert json.loads(out[0]) == {"type": "audio_codec", "codec": "opus"}
    reader = OpusFrameReader()
    assert isinstance(out[1], bytes) and len(out[1]) < FRAME_BYTES / 5
    assert [f.shape for f in reader.frames(out[1])] == [(FRAME_SAMPLES,)]
    later = codec.audio(_voice(3))
    assert len(later) == 1 and isinstance(later[0], bytes)  # the answer is said once


def test_broken_opus_pages_refuse_one_frame_and_the_next_decode():
    codec = ReferenceCodec()
    codec.decode(Incoming("text", ASK_OPUS))
    writer = OpusFrameWriter()
    codec.decode(Incoming("binary", writer.pages(_voice(0))))
    broken = codec.decode(Incoming("binary", b"OggS" + bytes(300)))
    assert isinstance(broken[0], wire.WireError) and broken[0].frame == 1
    after = codec.decode(Incoming("binary", writer.pages(_voice(2))))
    assert isinstance(after[0], Frame) and after[0].index == 2
    unknown = codec.decode(Incoming("text", '{"type": "audio_codec", "codec": "mp3"}'))
    assert isinstance(unknown[0], wire.WireError) and "mp3" in str(unknown[0])


def test_our_client_gets_opus_from_serve_at_a_fraction_of_pcm(tiny_host):
    frames = 30

    async def body(server, url):
        async with await EngineClient.connect(url, TOKEN, audio=wire.OPUS) as client:
            ready = client.ready
            for i in range(frames):
                await client.send_frame_encoded(_voice(i))
                if i == 0:  # the answer comes with the first audio: then Opus both ways
                    await collect(client, lambda ev: of(AudioFrame, ev))
            events = await collect(client, lambda ev: len(of(AudioFrame, ev)) == frames - 1)
            await client.send_span("the capital of australia is canberra", "notes")
            for i in range(frames, frames + 4):
                await client.send_frame_encoded(_voice(i))
            events += await collect(client, lambda ev: of(wire.Span, ev)
                                    and len(of(AudioFrame, ev)) == 4)
            return ready, events, client

    ready, events, client = run_server(tiny_host, body)
    assert client.audio_codec == wire.OPUS and client.audio_refused is None
    audio = of(AudioFrame, events)
    assert [a.index for a in audio] == list(range(1, frames + 4))  # each frame answered once
    assert all(a.pcm.shape == (FRAME_SAMPLES,) and a.rtt_ms is not None for a in audio)
    assert not of(wire.Error, events) and of(wire.Span, events)
    assert client.broken_audio == 0
    # The first frame went as PCM (7,680 bytes), the others as a few hundred bytes of Opus.
    opus_up = client.audio_bytes_sent - FRAME_BYTES
    assert opus_up / (frames + 3) < 1000
    assert client.audio_bytes_received / (frames + 4) < 1000 + FRAME_BYTES / (frames + 4)
    assert client.network_rtts_ms  # pinged: the network's own round trip is known
    assert ready.model == "tiny"


def test_an_older_server_refuses_the_request_and_the_audio_stays_pcm():
    """A `/ws` that knows nothing of Opus (as `serve` before it did): it answers the request
    with an error, takes PCM frames and answers each with PCM."""

    async def old_ws(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        await ws.send_str(wire.encode_event(wire.Ready(model="old")))
        async for message in ws:
            if message.type.name == "TEXT":
                await ws.send_str(wire.encode_event(wire.Error(
                    "message", f"unknown message type {json.loads(message.data)['type']!r}")))
            elif len(message.data) != FRAME_BYTES:
                await ws.send_str(wire.encode_event(wire.Error("frame", "not PCM")))
            else:
                await ws.send_bytes(message.data)
        return ws

    async def main():
        app = web.Application()
        app.router.add_get("/ws", old_ws)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        url = f"http://127.0.0.1:{runner.addresses[0][1]}"
        try:
            async with await EngineClient.connect(url, audio=wire.OPUS) as client:
                for i in range(5):
                    await client.send_frame_encoded(tone(i))
                events = await collect(client, lambda ev: len(of(AudioFrame, ev)) == 5)
                return client, events
        finally:
            await runner.cleanup()

    client, events = asyncio.run(asyncio.wait_for(main(), 60))
    assert client.audio_codec == wire.PCM and "audio_codec" in (client.audio_refused or "")
    assert not of(wire.Error, events)  # the refusal is the client's to handle, not shown
    assert [a.index for a in of(AudioFrame, events)] == list(range(5))
    assert client.audio_bytes_sent == 5 * FRAME_BYTES


def test_the_client_asks_only_for_a_codec_both_ends_have():
    with pytest.raises(ValueError, match="opus"):
        asyncio.run(EngineClient.connect("http://127.0.0.1:9", audio="flac"))
