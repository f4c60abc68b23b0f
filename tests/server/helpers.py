"""Helpers for the server tests: a server on 127.0.0.1 (a free port) around a loaded host,
run inside `asyncio.run` with the test's client in the same loop."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace

import aiohttp
import numpy as np

from app.frames import FRAME_SAMPLES
from app.server.config import Limits, ServerConfig
from app.server.engine_host import EngineHost
from app.server.web_app import EngineServer

TOKEN = "test-token-5f1c"
TIMEOUT_S = 120.0  # the shared CI machine can be slow: a frame may take a second


def run_server(host: EngineHost, body: Callable[[EngineServer, str], Awaitable],
               token: str | None = TOKEN, **limits) -> object:
    """Start a server on a free port, run `body(server, url)` against it, stop it."""

    async def main():
        config = ServerConfig(host="127.0.0.1", port=0, token=token,
                              limits=replace(Limits(), **limits))
        server = EngineServer(host, config)
        url = await server.start()
        try:
            return await asyncio.wait_for(body(server, url), TIMEOUT_S)
        finally:
            await server.stop()
            assert not host.busy, "the engine was not given back"

    return asyncio.run(main())


def tone(index: int) -> np.ndarray:
    t = (np.arange(FRAME_SAMPLES) + index * FRAME_SAMPLES) / 24000
    return (0.1 * np.sin(2 * np.pi * 220 * t)).astype(np.float32)


async def health(url: str) -> dict:
    async with aiohttp.ClientSession() as session, session.get(f"{url}/health") as response:
        return await response.json()


async def wait_until_free(url: str, timeout: float = 30.0) -> float:
    """Seconds until /health says the engine is free again."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if not (await health(url))["busy"]:
            return time.monotonic() - start
        await asyncio.sleep(0.02)
    raise AssertionError(f"the engine was still busy after {timeout} s")


async def collect(client, done: Callable[[list], bool], timeout: float = TIMEOUT_S) -> list:
    """Events from an EngineClient until `done(events)` (or the connection ends)."""
    from app.wire.client import Disconnected

    events: list = []
    deadline = time.monotonic() + timeout
    while not done(events):
        event = await client.receive(timeout=max(0.01, deadline - time.monotonic()))
        events.append(event)
        if isinstance(event, Disconnected):
            break
    return events


def of(kind, events: list) -> list:
    return [e for e in events if isinstance(e, kind)]


class FreezingRelay:
    """A TCP relay in front of the server that can go silent: it stops passing bytes either
    way and closes nothing, as when a client's machine loses its network. Only the server's
    heartbeat can find such a client."""

    def __init__(self, target_port: int) -> None:
        self._target_port = target_port
        self._frozen = False
        self._writers: list[asyncio.StreamWriter] = []
        self._server: asyncio.base_events.Server | None = None

    async def start(self) -> str:
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    def freeze(self) -> None:
        self._frozen = True

    async def stop(self) -> None:
        for writer in self._writers:
            writer.transport.abort()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _relay(self, client_in: asyncio.StreamReader,
                     client_out: asyncio.StreamWriter) -> None:
        server_in, server_out = await asyncio.open_connection("127.0.0.1", self._target_port)
        self._writers += [client_out, server_out]
        await asyncio.gather(self._pump(client_in, server_out),
                             self._pump(server_in, client_out), return_exceptions=True)

    async def _pump(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        while data := await source.read(65536):
            if not self._frozen:  # frozen: read and drop, so nobody sees a full socket
                sink.write(data)
                await sink.drain()
