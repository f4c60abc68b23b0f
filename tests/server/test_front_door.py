"""The cluster's front door (app/server/front_door.py) never holds a client for ever: when
Serve's proxy takes the connection and does not answer (every replica at its limit, Serve
queueing), /health and a conversation's handshake get a 504 within the door's timeout."""

from __future__ import annotations

import asyncio

import aiohttp

from app.server.config import ServerConfig
from app.server.front_door import FrontDoor


async def _silent_upstream() -> tuple[asyncio.AbstractServer, str, list[asyncio.StreamWriter]]:
    """Accepts connections and reads them, never answers (a proxy queueing requests)."""
    held: list[asyncio.StreamWriter] = []

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)
        await reader.read(65536)
        await asyncio.sleep(3600)

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}", held


def test_a_proxy_that_never_answers_is_a_504_not_a_hang() -> None:
    async def body() -> tuple[int, str, int]:
        upstream, url, held = await _silent_upstream()
        door = FrontDoor(url, ServerConfig(host="127.0.0.1", port=0))
        door.answer_timeout_s = 0.5
        base = await door.start()
        try:
            async with aiohttp.ClientSession() as client:
                async with client.get(base + "/health",
                                      timeout=aiohttp.ClientTimeout(total=20)) as answer:
                    health = (answer.status, await answer.text())
                async with client.get(base + "/ws", headers={
                        "Connection": "Upgrade", "Upgrade": "websocket",
                        "Sec-WebSocket-Version": "13",
                        "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="},
                        timeout=aiohttp.ClientTimeout(total=20)) as answer:
                    handshake = answer.status
            return health[0], health[1], handshake
        finally:
            await door.stop()
            for writer in held:
                writer.close()
            upstream.close()

    status, text, handshake = asyncio.run(body())
    assert status == 504 and "did not answer within 0.5 s" in text
    assert handshake == 504


def test_a_busy_engine_behind_the_door_answers_503_retry_after_and_busy(tiny_host) -> None:
    """`serve`'s own answer to a moshi client while its engine is held (HTTP 503, Retry-After,
    a JSON `busy` body) reaches the client through the door as it was sent."""
    from app.wire.client import EngineClient
    from tests.server.helpers import TOKEN, run_server

    async def body(server, upstream_url):
        door = FrontDoor(upstream_url, ServerConfig(host="127.0.0.1", port=0, token=TOKEN))
        url = await door.start()
        try:
            # The first client holds the one engine.
            async with await EngineClient.connect(url, TOKEN), aiohttp.ClientSession() as client:
                answers = []
                for base in (upstream_url, url):  # the server itself, then the door
                    async with client.get(base + "/api/chat", headers={
                            "Authorization": f"Bearer {TOKEN}",
                            "Connection": "Upgrade", "Upgrade": "websocket",
                            "Sec-WebSocket-Version": "13",
                            "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}) as answer:
                        answers.append((answer.status, answer.headers.get("Retry-After"),
                                        answer.content_type, await answer.json()))
                return answers
        finally:
            await door.stop()

    direct, through_door = run_server(tiny_host, body)
    assert direct[0] == 503 and direct[1] and direct[2] == "application/json"
    assert direct[3]["type"] == "busy"
    assert through_door == direct
