"""What a server shared over a network must survive: a second client, a client that
vanishes or stops reading, garbage and oversized messages, an idle or endless connection.
Each is answered (an event, a status, a close) and the engine is given back."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading

import aiohttp
import numpy as np
import pytest

from app.server.codec import Frame
from app.server.config import Limits
from app.server.connection import Connection
from app.server.metrics import ServerMetrics
from app.server.reference_codec import ReferenceCodec
from app.server.wire_socket import Incoming
from app.wire import events as wire
from app.wire.client import AudioFrame, Disconnected, EngineClient, ServerBusy
from tests.server.helpers import (
    TOKEN,
    FreezingRelay,
    collect,
    health,
    of,
    run_server,
    tone,
    wait_until_free,
)


def test_a_second_client_gets_busy_then_a_close(tiny_host):
    async def body(server, url):
        async with await EngineClient.connect(url, TOKEN):
            with pytest.raises(ServerBusy) as busy:
                await EngineClient.connect(url, TOKEN)
            async with aiohttp.ClientSession() as session, session.ws_connect(
                    f"{url}/ws", headers={"Authorization": f"Bearer {TOKEN}"}) as ws:
                first = await ws.receive(timeout=30)
                closing = await ws.receive(timeout=30)
            return busy.value.busy, json.loads(first.data), closing.type, ws.close_code

    busy, first, closing, code = run_server(tiny_host, body)
    assert busy.retry_after_s and "another conversation" in busy.message
    assert first["type"] == "busy"
    assert closing == aiohttp.WSMsgType.CLOSE and code == 1013  # try again later


def test_a_client_that_dies_frees_the_engine_at_once(tiny_host):
    """Its process ended (the OS resets the connection, no WebSocket close): the engine is
    free as soon as the server reads that, long before any heartbeat or idle timeout."""

    async def body(server, url):
        session = aiohttp.ClientSession()
        ws = await session.ws_connect(f"{url}/ws?token={TOKEN}")
        await ws.receive(timeout=60)  # ready
        for i in range(3):
            await ws.send_bytes(tone(i).tobytes())
        await ws.receive(timeout=60)  # the conversation runs
        assert (await health(url))["busy"]
        ws._response.connection.transport.abort()
        freed = await wait_until_free(url, timeout=30)
        await session.close()
        return freed, server.metrics.closed

    # Heartbeat and idle timeout far beyond the wait: only the reset itself can free it.
    freed, closed = run_server(tiny_host, body, heartbeat_s=120.0, idle_timeout_s=120.0)
    print(f"engine freed {freed * 1000:.0f} ms after the client died")
    assert sum(closed.values()) == 1 and closed["client closed"] == 1


def test_a_client_whose_network_vanished_is_found_by_the_heartbeat(tiny_host):
    """No byte arrives any more and nothing is closed: the server's ping goes unanswered,
    and the engine is freed within 1.5 heartbeats (0.75 s here)."""

    async def body(server, url):
        relay = FreezingRelay(server.port)
        relayed = await relay.start()
        try:
            client = await EngineClient.connect(relayed, TOKEN)
            for i in range(3):
                await client.send_frame(tone(i))
            await collect(client, lambda ev: of(AudioFrame, ev))
            relay.freeze()
            freed = await wait_until_free(url, timeout=30)
        finally:
            await relay.stop()
        await client.close()
        return freed, server.metrics.closed

    # The idle timeout is far beyond the wait: only the heartbeat can free it.
    freed, closed = run_server(tiny_host, body, heartbeat_s=0.5, idle_timeout_s=120.0)
    print(f"engine freed {freed * 1000:.0f} ms after the client's network vanished")
    assert closed["client vanished"] == 1


def test_garbage_frames_and_oversized_messages_get_errors_not_a_crash(tiny_host):
    async def body(server, url):
        async with await EngineClient.connect(url, TOKEN) as client:
            await client.send_raw(b"\x01\x02\x03")  # not float32
            await client.send_raw(np.zeros(1000, dtype=np.float32).tobytes())  # wrong length
            nan = tone(0).copy()
            nan[7] = np.nan
            await client.send_frame(nan)
            await client.send_raw(b"\x00" * (64 * 1024 + 1))  # over the message limit
            await client._ws.send_str("{not json")
            await client._ws.send_str(json.dumps({"type": "span", "text": ""}))
            await client._ws.send_str(json.dumps({"type": "launch"}))
            loud = np.full(1920, 1e30, dtype=np.float32)  # finite but absurd: clipped
            await client.send_frame(loud)
            await client.send_frame(tone(1))
            events = await collect(client, lambda ev: len(of(AudioFrame, ev)) == 2)
            return events, await health(url)

    events, status = run_server(tiny_host, body)
    errors = [(e.stage, e.frame) for e in of(wire.Error, events)]
    assert errors[:4] == [("frame", 0), ("frame", 1), ("frame", 2), ("message", 3)]
    assert errors[4:] == [("message", None), ("span", None), ("message", None)]
    assert [a.index for a in of(AudioFrame, events)] == [4, 5]  # the server took both
    assert status["status"] == "ready" and not of(Disconnected, events)


def test_a_message_over_the_hard_cap_closes_with_1009(tiny_host):
    async def body(server, url):
        async with await EngineClient.connect(url, TOKEN) as client:
            await client.send_raw(b"\x00" * (Limits().hard_message_bytes + 1))
            events = await collect(client, lambda ev: of(Disconnected, ev))
            freed = await wait_until_free(url)
            return events[-1], freed, server.metrics.closed

    closed, freed, reasons = run_server(tiny_host, body)
    assert closed.code == 1009 and reasons["message too big"] == 1


def test_an_idle_client_is_told_and_closed(tiny_host):
    async def body(server, url):
        async with await EngineClient.connect(url, TOKEN) as client:
            return await collect(client, lambda ev: of(Disconnected, ev))

    events = run_server(tiny_host, body, idle_timeout_s=0.5)
    error = of(wire.Error, events)[0]
    assert error.stage == "idle" and "0.5 s" in error.message
    assert of(Disconnected, events)[0].code == 1000


def test_a_conversation_longer_than_the_limit_is_told_and_closed(tiny_host):
    async def body(server, url):
        async with await EngineClient.connect(url, TOKEN) as client:

            async def talk() -> None:
                for i in range(10_000):
                    await client.send_frame(tone(i))
                    await asyncio.sleep(0.1)

            talking = asyncio.create_task(talk())
            events = await collect(client, lambda ev: of(Disconnected, ev))
            talking.cancel()
            with contextlib.suppress(BaseException):
                await talking
            return events, server.metrics.closed

    events, closed = run_server(tiny_host, body, max_conversation_s=1.0)
    assert [e.stage for e in of(wire.Error, events)] == ["limit"]
    assert of(AudioFrame, events) and closed["time limit"] == 1


class _StuckSocket:
    """A peer whose reading stopped: every send hangs (its TCP window is full)."""

    def __init__(self) -> None:
        self.incoming: asyncio.Queue[Incoming] = asyncio.Queue()
        self.aborted = False

    async def receive(self) -> Incoming:
        return await self.incoming.get()

    async def send(self, data) -> None:
        if isinstance(data, bytes):  # events still go; audio never leaves
            await asyncio.Event().wait()

    async def close(self, code: int, reason: str) -> None:
        await asyncio.Event().wait()

    def abort(self) -> None:
        self.aborted = True


def test_a_client_that_stops_reading_is_dropped_and_the_engine_freed(tiny_host):
    async def main():
        socket, lease = _StuckSocket(), tiny_host.try_lease()
        connection = Connection(socket, ReferenceCodec(), lease,
                                Limits(max_send_lag_s=0.5), ServerMetrics())
        running = asyncio.create_task(connection.run())
        for i in range(3):
            socket.incoming.put_nowait(Incoming("binary", tone(i).tobytes()))
        return await asyncio.wait_for(running, 120), socket.aborted

    reason, aborted = asyncio.run(main())
    assert reason == "slow client" and aborted and not tiny_host.busy


def test_frames_a_client_sends_faster_than_real_time_all_get_an_answer(tiny_host):
    """One step per frame, as the reference: a burst beyond the engine's 2 s queue waits at
    the socket instead of being dropped."""
    frames = 40

    async def body(server, url):
        async with await EngineClient.connect(url, TOKEN) as client:
            for i in range(frames):
                await client.send_frame(tone(i))
            return await collect(client, lambda ev: len(of(AudioFrame, ev)) == frames)

    events = run_server(tiny_host, body)
    assert [a.index for a in of(AudioFrame, events)] == list(range(frames))


def test_reference_frames_are_checked_before_the_engine_sees_them():
    codec = ReferenceCodec()
    good = codec.decode(Incoming("binary", tone(0).tobytes()))[0]
    assert isinstance(good, Frame) and good.index == 0
    clipped = codec.decode(Incoming("binary", np.full(1920, -9.0, "<f4").tobytes()))[0]
    assert isinstance(clipped, Frame) and clipped.pcm.min() == -1.0
    inf = codec.decode(Incoming("binary", np.full(1920, np.inf, "<f4").tobytes()))[0]
    assert isinstance(inf, wire.WireError) and inf.frame == 2


class _FloodingSocket:
    """A peer with `count` messages of `size` bytes all sent at once; counts what was read."""

    def __init__(self, count: int, size: int) -> None:
        self.waiting = [Incoming("binary", b"\x00" * size) for _ in range(count)]
        self.read = 0
        self.closed = asyncio.Event()

    async def receive(self) -> Incoming:
        if self.read < len(self.waiting):
            self.read += 1
            return self.waiting[self.read - 1]
        await self.closed.wait()
        return Incoming("closed")

    async def send(self, data) -> None:
        pass

    async def close(self, code: int, reason: str) -> None:
        self.closed.set()

    def abort(self) -> None:
        self.closed.set()


def test_large_messages_read_ahead_are_bounded_in_bytes_while_an_engine_is_built(tiny_host):
    """A clone's recording may be 30 s of PCM, so the hard limit is megabytes: a client that
    sends many such messages while its conversation's engine is being built has only a few
    of them held in memory (Limits.inbox_bytes); the rest wait at its socket."""
    limits = Limits()
    size = limits.hard_message_bytes // 2  # read, then refused as over the message limit
    gate = threading.Event()

    async def main():
        socket, lease = _FloodingSocket(40, size), tiny_host.try_lease()
        build = lease.build

        def slow_build(choice):  # the engine takes its time to load
            gate.wait(60)
            return build(choice)

        lease.build = slow_build  # type: ignore[method-assign]
        connection = Connection(socket, ReferenceCodec(), lease, limits, ServerMetrics())
        running = asyncio.create_task(connection.run())
        for _ in range(200):  # loop turns, not time: the reader takes all it may take
            await asyncio.sleep(0)
        held = socket.read
        gate.set()
        while socket.read < len(socket.waiting):
            await asyncio.sleep(0.01)
        socket.closed.set()
        await asyncio.wait_for(running, 120)
        return held, connection.metrics.refused["message"]

    held, refused = asyncio.run(main())
    assert held <= limits.inbox_bytes // size + 1, held
    assert refused == 40 and not tiny_host.busy
