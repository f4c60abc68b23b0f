"""moshi's `/api/chat`, spoken by moshi's own client code (`moshi.client.Connection`, with
its sound card replaced by the test feeding its audio callback): handshake, Opus both
ways at the right frame count, text pieces, and nothing it does not know; our JSON kind
(0x10) carries a span in and its events out, for a client that asked for them."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import moshi.client as moshi_client
import numpy as np
import pytest
import sphn

from tests.server.helpers import TOKEN, of, run_server, tone

FRAME = 1920


class _NoSoundCard:
    def __init__(self, *args, **kwargs) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc_info) -> None:
        return None


class _Printer:
    """moshi's printer interface, keeping what it is told."""

    def __init__(self) -> None:
        self.tokens: list[str] = []
        self.logs: list[tuple[str, str]] = []

    def print_header(self) -> None: ...
    def print_pending(self) -> None: ...
    def print_lag(self) -> None: ...

    def print_token(self, token: str) -> None:
        self.tokens.append(token)

    def log(self, level: str, msg: str) -> None:
        self.logs.append((level, msg))


@pytest.fixture()
def no_sound_card(monkeypatch):
    monkeypatch.setattr(moshi_client.sd, "InputStream", _NoSoundCard)
    monkeypatch.setattr(moshi_client.sd, "OutputStream", _NoSoundCard)


def chat_url(url: str) -> str:
    return url.replace("http://", "ws://") + f"/api/chat?token={TOKEN}"


def test_moshi_client_hears_a_frame_for_each_frame_and_text(tiny_host, no_sound_card):
    frames = 12

    async def body(server, url):
        async with aiohttp.ClientSession() as session, \
                session.ws_connect(chat_url(url)) as ws:
            printer = _Printer()
            connection = moshi_client.Connection(printer, ws, asyncio.get_running_loop())
            running = asyncio.create_task(connection.run())
            for i in range(frames):  # the microphone callback, at the microphone's pace
                connection._on_audio_input(tone(i)[:, None], FRAME, None, None)
                await asyncio.sleep(0.08)
            while connection._output_queue.qsize() < frames:
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.5)  # nothing more may come
            out = connection._output_queue.qsize()
            await ws.close()
            await asyncio.wait_for(running, 10)
            return printer, out

    printer, out = run_server(tiny_host, body)
    assert out == frames
    assert "".join(printer.tokens).strip()  # the model's words, as text pieces
    # moshi's client logs the handshake as unknown (its server sends it too); nothing else.
    assert [m for _, m in printer.logs] == ["unknown message kind 0"]


def test_handshake_first_then_opus_and_a_span_over_the_wire(tiny_host):
    frames = 5

    async def body(server, url):
        writer, reader = sphn.OpusStreamWriter(24000), sphn.OpusStreamReader(24000)
        kinds, events, pcm = [], [], []
        async with aiohttp.ClientSession() as session, \
                session.ws_connect(chat_url(url)) as ws:
            first = await ws.receive(timeout=60)
            await ws.send_bytes(b"\x10" + json.dumps(
                {"type": "span", "text": "the capital of australia is canberra",
                 "source": "laptop", "id": 7}).encode())
            await ws.send_bytes(b"\x01garbage")  # not Opus: refused, the stream goes on
            for i in range(frames):
                await ws.send_bytes(b"\x01" + writer.append_pcm(tone(i)))
            while sum(len(p) for p in pcm) < frames * FRAME or not any(
                    e["type"] == "span" for e in events):
                message = await ws.receive(timeout=60)
                kind, payload = message.data[0], message.data[1:]
                kinds.append(kind)
                if kind == 1:
                    pcm.append(reader.append_bytes(payload))
                elif kind == 0x10:
                    events.append(json.loads(payload))
            return first.data, kinds, events, sum(len(p) for p in pcm)

    first, kinds, events, samples = run_server(tiny_host, body)
    assert first == b"\x00"
    assert samples == frames * FRAME
    assert 2 in kinds and 5 in kinds  # text pieces, and moshi's error kind for the garbage
    types = [e["type"] for e in events]
    assert types[:2] == ["span_queued", "error"] and "span_accepted" in types
    assert events[0]["id"] == "7" and events[1]["stage"] == "frame"
    landed = next(e for e in events if e["type"] == "span")
    assert landed["source"] == "laptop" and landed["frames"] > 0 and landed["prefill_ms"] > 0


def test_json_events_go_only_to_a_client_that_asked(tiny_host):
    async def kinds_heard(url: str, query: str) -> list[int]:
        writer = sphn.OpusStreamWriter(24000)
        kinds: list[int] = []
        async with aiohttp.ClientSession() as session, \
                session.ws_connect(chat_url(url) + query) as ws:
            assert (await ws.receive(timeout=60)).data == b"\x00"
            await ws.send_bytes(b"\x01garbage")  # refused: an error
            await ws.send_bytes(b"\x01" + writer.append_pcm(tone(0)))
            while 1 not in kinds:  # the frame's reply comes after the error
                kinds.append((await ws.receive(timeout=60)).data[0])
        return kinds

    async def body(server, url):
        stock = await kinds_heard(url, "")
        while server.host.busy:  # the first conversation's engine is stopping
            await asyncio.sleep(0.02)
        return stock, await kinds_heard(url, "&events=json")

    stock, asked = run_server(tiny_host, body)
    assert 5 in stock and 0x10 not in stock  # moshi's error kind only
    assert 5 in asked and 0x10 in asked


def test_a_second_moshi_client_gets_http_503(tiny_host):
    async def body(server, url):
        async with aiohttp.ClientSession() as session, \
                session.ws_connect(chat_url(url)) as first:
            assert (await first.receive(timeout=60)).data == b"\x00"
            with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                await session.ws_connect(chat_url(url))
            return refused.value.status, server.metrics.busy

    assert run_server(tiny_host, body) == (503, 1)


def test_opus_pages_decode_to_whole_frames():
    from app.server.moshi_codec import MoshiCodec
    from app.server.wire_socket import Incoming

    codec, writer = MoshiCodec(), sphn.OpusStreamWriter(24000)
    page = writer.append_pcm(np.zeros(FRAME * 3, dtype=np.float32))
    decoded = codec.decode(Incoming("binary", b"\x01" + page))
    assert [f.index for f in decoded] == [0, 1, 2]
    assert codec.decode(Incoming("binary", b"\x06ping")) == []  # moshi's other kinds: skipped
    assert of(Exception, codec.decode(Incoming("text", "hello")))
