"""Clients that vanish at every point of a conversation's life give their slot back.

A `--slots 3` host on the tiny model. Clients reset their connection (a TCP RST, nothing
said) while the server builds their conversation (the build held until the connection has
ended, so the race is met every time), and right after the WebSocket upgrade, before
`ready`, thirty times; others vanish with
their conversation started and frames in flight, with a span on its way, and while their
conversation is leaving after a `reset`. After each wave `/health` must say three slots
free again and so must the engine's own rows; then three clients all get `ready` and a
fourth is told `busy`. Every wait is bounded; nothing here is timed.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import socket
import struct
import threading
import time
from pathlib import Path

import aiohttp
import pytest

from app.checkpoints.catalog import get_manifest
from app.checkpoints.loader import load_checkpoint
from app.engine.speech_engine import EngineOptions
from app.server.engine_host import EngineHost
from app.wire.client import AudioFrame, EngineClient, ServerBusy
from tests.server.helpers import TOKEN, collect, of, run_server, tone

SLOTS = 3
RESETS = 30
WAIT_S = 60.0  # a bound on each wait for the slots to come back, never a measured time


@pytest.fixture(scope="module", params=["speech", "speech and recognition"])
def three_slots(request, tiny_folder: Path) -> EngineHost:
    """A --slots 3 host, with (`serve --asr tiny-stt`) or without its shared recogniser."""
    checkpoint = load_checkpoint(get_manifest("tiny"), tiny_folder, device="cpu")
    config, stt = None, None
    if request.param == "speech and recognition":
        from app.asr.stt_catalog import ensure_stt_built, get_stt_manifest
        from app.conversation.assembly import load_stt_model
        from app.conversation.config import ConversationConfig

        ensure_stt_built(get_stt_manifest("tiny-stt"))
        config = ConversationConfig(stt_model="tiny-stt")
        stt = load_stt_model(config, checkpoint.device)
    host = EngineHost(checkpoint, EngineOptions(seed=1, chunk_limit=16), config, stt,
                      slots=SLOTS)
    host.wait_warm()
    yield host
    assert host.close()


def _upgrade(port: int) -> tuple[socket.socket, int]:
    """A WebSocket upgrade by hand: the socket and the status line's code."""
    key = base64.b64encode(os.urandom(16)).decode()
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall((f"GET /ws?token={TOKEN} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                  "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                  f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(4096)
        if not chunk:
            break
        head += chunk
    return sock, int(head.split(b" ", 2)[1]) if head else 0


def _reset(sock: socket.socket) -> None:
    """Close with SO_LINGER 0: a TCP reset, nothing said."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def _upgrade_then_reset(port: int) -> int:
    sock, code = _upgrade(port)
    _reset(sock)
    return code


def _abort(client: EngineClient) -> None:
    """The client's machine is gone: its TCP connection reset, no close frame."""
    transport = client._ws._response.connection.transport  # the socket under aiohttp
    sock = transport.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()


async def _all_free(host: EngineHost, url: str) -> dict:
    """Wait (bounded) until /health and the engine's rows both say every slot is free."""
    deadline = time.monotonic() + WAIT_S
    async with aiohttp.ClientSession() as session:
        while True:
            async with session.get(f"{url}/health") as response:
                body = await response.json()
            recognising = host.recogniser.free_rows if host.recogniser is not None else SLOTS
            if (body["free_slots"] == SLOTS and host.engine.free_rows == SLOTS
                    and recognising == SLOTS):
                return body
            if time.monotonic() > deadline:
                raise AssertionError(f"slots did not come back: /health {body}, engine rows "
                                     f"free {host.engine.free_rows}, recogniser's "
                                     f"{recognising}")
            await asyncio.sleep(0.05)


def test_every_vanished_client_gives_its_slot_back(three_slots, monkeypatch):
    host = three_slots
    from app.server import engine_host

    # 0. Vanished while its conversation was being built (off the event loop): the build is
    # held until the server has seen the reset and ended the connection, every time.
    building, build_may_go = threading.Event(), threading.Event()
    build_pipeline = engine_host.build_pipeline

    def held_build(*args, **kwargs):
        building.set()
        build_may_go.wait(WAIT_S)
        return build_pipeline(*args, **kwargs)

    async def main(server, url: str):
        port = int(url.rsplit(":", 1)[1])
        loop = asyncio.get_running_loop()
        monkeypatch.setattr(engine_host, "build_pipeline", held_build)
        for _ in range(SLOTS):
            building.clear()
            build_may_go.clear()
            sock, code = await loop.run_in_executor(None, _upgrade, port)
            assert code == 101
            assert await loop.run_in_executor(None, building.wait, WAIT_S)
            _reset(sock)  # while the server builds its conversation
            deadline = time.monotonic() + WAIT_S
            while host._leases and time.monotonic() < deadline:  # the connection is over
                await asyncio.sleep(0.02)
            build_may_go.set()
        monkeypatch.setattr(engine_host, "build_pipeline", build_pipeline)
        await _all_free(host, url)

        # 1. Reset right after the upgrade, before `ready`: thirty of them, three at a time.
        codes = []
        for _ in range(RESETS // SLOTS):
            codes += await asyncio.gather(*(loop.run_in_executor(None, _upgrade_then_reset, port)
                                            for _ in range(SLOTS)))
        assert set(codes) <= {101, 503} and 101 in codes
        await _all_free(host, url)

        # 2. Mid-frame: ready, frames sent and some answered, then gone.
        clients = [await EngineClient.connect(url, TOKEN) for _ in range(SLOTS)]
        for client in clients:
            for i in range(6):
                await client.send_frame(tone(i))
        await asyncio.gather(*(collect(c, lambda ev: len(of(AudioFrame, ev)) >= 2)
                               for c in clients))
        for client in clients:
            _abort(client)
        await _all_free(host, url)

        # 3. Mid-span: a span on its way with the frames, then gone.
        clients = [await EngineClient.connect(url, TOKEN) for _ in range(SLOTS)]
        for client in clients:
            await client.send_span("the capital of australia is canberra " * 4, "notes")
            for i in range(4):
                await client.send_frame(tone(i))
            _abort(client)
        await _all_free(host, url)

        # 4. While leaving: a reset (the conversation stops, a new one is built), then gone.
        clients = [await EngineClient.connect(url, TOKEN) for _ in range(SLOTS)]
        for client in clients:
            await client.send_frame(tone(0))
            await client._ws.send_str(json.dumps({"type": "reset"}))
            await client.send_frame(tone(1))
            _abort(client)
        health = await _all_free(host, url)
        assert health["busy"] is False

        # Then: three clients all get `ready`, a fourth is told busy.
        clients = [await EngineClient.connect(url, TOKEN) for _ in range(SLOTS)]
        assert all(client.ready is not None for client in clients)
        with pytest.raises(ServerBusy):
            extra = await EngineClient.connect(url, TOKEN)
            await extra.close()
        async with aiohttp.ClientSession() as session, session.get(f"{url}/health") as reply:
            full = await reply.json()
        assert full["free_slots"] == 0 and full["busy"] is True
        for client in clients:
            await client.close()
        await _all_free(host, url)

    run_server(host, main)
