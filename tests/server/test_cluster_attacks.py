"""`serve --cluster` holds where `serve` holds (issue 19, items 13, 16 and 17 on the cluster's
front door): half-open requests are closed after the header deadline, a connection past the
cap gets 503, a tokenless loopback cluster refuses web pages and rebound names, header bytes
that are not UTF-8 are a wrong token; and a conversation still goes through.

The first part runs the attacks against a real local Ray cluster (one tiny replica), at the
address `deploy` announces; the second drives the replica's ingress app in-process.
Needs the `cluster` extra (ray[serve]); skipped without it.
"""

from __future__ import annotations

import asyncio
import time
from typing import cast

import aiohttp
import pytest

pytest.importorskip("ray.serve")

from app.conversation.config import ConversationConfig
from app.engine.speech_engine import EngineOptions
from app.server.config import Limits
from app.wire.client import AudioFrame, EngineClient, ServerBusy
from tests.ports import free_port
from tests.server.helpers import TOKEN, collect, of, tone

pytestmark = pytest.mark.slow
HEADER_TIMEOUT_S = 2.0
MAX_CONNECTIONS = 4


@pytest.fixture(scope="module")
def cluster_url(tiny_folder):
    """A tokenless cluster on the loopback (the rule for web pages applies), tight limits."""
    import ray
    from ray import serve

    from app.server.cluster import ClusterSettings, deploy, start_ray

    settings = ClusterSettings(
        conversation=ConversationConfig(model_id="tiny", device="cpu",
                                        custom_folder=str(tiny_folder)),
        engine_options=EngineOptions(seed=1, chunk_limit=16), token=None,
        limits=Limits(header_timeout_s=HEADER_TIMEOUT_S, max_connections=MAX_CONNECTIONS),
        min_replicas=1, max_replicas=1, gpus_per_replica=0, cpus_per_replica=0.5,
        host="127.0.0.1", port=free_port())
    start_ray(None, num_cpus=2)  # as serve --cluster starts a local one
    door = None
    try:
        door = deploy(settings)
        yield f"http://127.0.0.1:{settings.port}"
    finally:
        stop = getattr(door, "stop", None)
        if stop is not None:
            stop()
        serve.shutdown()
        ray.shutdown()


async def _half_open(url: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Trickle: a")
    await writer.drain()
    return reader, writer


async def _closed_by_server(reader: asyncio.StreamReader, within_s: float) -> bool:
    try:
        await asyncio.wait_for(reader.read(), within_s)
        return True
    except (asyncio.TimeoutError, ConnectionError):
        return False


async def _status(session: aiohttp.ClientSession, url: str, path: str,
                  headers: dict[str, str]) -> int:
    if path in ("/health", "/metrics"):
        async with session.get(url + path, headers=headers) as response:
            return response.status
    try:
        async with session.ws_connect(url.replace("http", "ws") + path, headers=headers) as ws:
            await ws.close()
            return 101
    except aiohttp.WSServerHandshakeError as exc:
        return exc.status


def test_half_open_requests_to_the_cluster_are_closed_after_the_header_deadline(cluster_url):
    async def main():
        sockets = [await _half_open(cluster_url) for _ in range(MAX_CONNECTIONS - 1)]
        closed = await asyncio.gather(*(_closed_by_server(r, 30.0) for r, _ in sockets))
        for _, writer in sockets:
            writer.close()
        return closed

    assert all(asyncio.run(main()))


def test_past_the_cap_a_connection_to_the_cluster_gets_503(cluster_url):
    async def main():
        await asyncio.sleep(HEADER_TIMEOUT_S)  # the last test's connections are gone
        held = [await _half_open(cluster_url) for _ in range(MAX_CONNECTIONS)]
        # The extra one sends nothing: bytes the server never reads before it closes would
        # turn its close into a reset, and the 503 before it could be lost.
        host, port = cluster_url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            return await asyncio.wait_for(reader.read(), 30.0)
        except asyncio.TimeoutError:
            return b"(no answer)"
        finally:
            writer.close()
            for _, other in held:
                other.close()

    answer = asyncio.run(main())
    assert answer.startswith(b"HTTP/1.1 503"), answer[:200]


def test_a_tokenless_cluster_refuses_web_pages_and_rebound_names(cluster_url):
    port = cluster_url.rsplit(":", 1)[1]

    async def main():
        await asyncio.sleep(HEADER_TIMEOUT_S)
        results = {}
        async with aiohttp.ClientSession() as session:
            for label, headers in (("evil origin", {"Origin": "https://evil.example"}),
                                   ("null origin", {"Origin": "null"}),
                                   ("rebound host", {"Host": f"attacker.example:{port}"})):
                for path in ("/ws", "/api/chat", "/metrics", "/health"):
                    results[label, path] = await _status(session, cluster_url, path, headers)
            results["no origin", "/health"] = await _status(session, cluster_url, "/health",
                                                            {})
        return results

    results = asyncio.run(main())
    refused = {key: code for key, code in results.items() if key[0] != "no origin"}
    assert set(refused.values()) == {403}, refused
    assert results["no origin", "/health"] == 200


def test_a_conversation_still_goes_through_the_front_door(cluster_url):
    async def connect() -> EngineClient:
        deadline = time.monotonic() + 60
        while True:  # the last test's handshakes held the one replica for a moment
            try:
                return await EngineClient.connect(cluster_url, None)
            except ServerBusy:
                assert time.monotonic() < deadline, "the replica never came free"
                await asyncio.sleep(0.5)

    async def main():
        async with await connect() as client:
            await client.send_span("a fact", "notes")
            for i in range(3):
                await client.send_frame(tone(i))
            return await collect(client, lambda ev: len(of(AudioFrame, ev)) == 3, timeout=60)

    assert len(of(AudioFrame, asyncio.run(main()))) == 3


# ---- the replica's ingress, in-process -------------------------------------------------------

class _Replica:
    """What the ingress's handlers read of their replica: its settings, host and metrics."""

    def __init__(self, engine_host, token: str | None) -> None:
        from app.server.cluster import ClusterSettings
        from app.server.metrics import ServerMetrics

        self.settings = ClusterSettings(token=token, host="127.0.0.1")
        self.host = engine_host
        self.metrics = ServerMetrics()

    def __getattr__(self, name: str):
        from app.server.cluster import EngineReplica

        return getattr(EngineReplica, name).__get__(self)  # the replica's own methods


@pytest.fixture()
def ingress(monkeypatch, tiny_host):
    from starlette.testclient import TestClient

    from app.server import cluster

    def make(token: str | None) -> TestClient:
        replica = _Replica(tiny_host, token)
        monkeypatch.setattr(cluster, "_replica", lambda: replica)
        return TestClient(cluster.ASGI_APP, base_url="http://127.0.0.1:8998")

    return make


def test_the_replica_reads_a_utf8_token_as_serve_does(ingress):
    """Header bytes are UTF-8 to aiohttp (`serve`) but Latin-1 to Starlette: the same token
    must open both, and bytes that are no UTF-8 must be a wrong token on both."""
    token = "jeton-é-" + TOKEN
    client = ingress(token)
    raw = ("Bearer " + token).encode()
    assert client.get("/metrics", headers=[(b"Authorization", raw)]).status_code == 200
    assert client.get("/metrics", headers=[
        (b"Authorization", b"Bearer \xff\xfe\xc3(")]).status_code == 401


def test_the_replica_refuses_a_web_page_when_it_has_no_token(ingress):
    client = ingress(None)
    assert client.get("/health", headers={"Origin": "https://evil.example"}).status_code == 403
    assert client.get("/metrics", headers={"Host": "attacker.example:8998"}).status_code == 403


# ---- the front door, in-process, before `serve` standing in for Serve's proxy --------------

async def _raw_request(url: str, request: bytes) -> bytes:
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(request)
        await writer.drain()
        return await asyncio.wait_for(reader.read(4096), 30)
    finally:
        writer.close()


def test_the_front_door_relays_a_conversation_and_refuses_bad_header_bytes(tiny_host):
    from app.server.config import ServerConfig
    from app.server.front_door import FrontDoor
    from tests.server.helpers import run_server

    async def body(server, upstream_url):
        door = FrontDoor(upstream_url, ServerConfig(host="127.0.0.1", port=0, token=TOKEN))
        url = await door.start()
        try:
            answers = [await _raw_request(url, (
                b"GET " + path + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                b"Authorization: Bearer \xff\xfe\xc3(\r\nConnection: close\r\n\r\n"))
                for path in (b"/ws", b"/api/chat", b"/metrics")]
            async with await EngineClient.connect(url, TOKEN) as client:
                for i in range(3):
                    await client.send_frame(tone(i))
                events = await collect(client, lambda ev: len(of(AudioFrame, ev)) == 3)
                with pytest.raises(ServerBusy):  # the one engine is held: `busy`, relayed
                    await EngineClient.connect(url, TOKEN)
            return answers, events, door.metrics.unauthorized
        finally:
            await door.stop()

    result = cast("tuple[list[bytes], list, int]", run_server(tiny_host, body))
    answers, events, unauthorized = result
    for answer in answers:
        assert answer.split(b"\r\n", 1)[0].endswith(b"401 Unauthorized"), answer[:200]
    assert unauthorized == 3
    assert len(of(AudioFrame, events)) == 3


def test_a_busy_replica_answers_api_chat_as_serve_does(ingress, tiny_host, monkeypatch):
    """moshi's clients read `serve`'s busy `/api/chat` as an HTTP 503 before the upgrade,
    with Retry-After and a JSON `busy` body; a replica must not upgrade and then close with
    1013 instead. `/ws` keeps the reference's answer: a `busy` event, then 1013."""
    from types import SimpleNamespace

    from starlette.testclient import WebSocketDenialResponse

    from app.server import cluster
    from app.server.web_app import RETRY_AFTER_S

    # The busy answer counts the replicas Serve runs: one, as a replica outside Serve.
    monkeypatch.setattr(cluster.serve, "get_replica_context",
                        lambda: SimpleNamespace(world_size=1))
    client = ingress(TOKEN)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    held = tiny_host.try_lease()
    assert held is not None
    try:
        with pytest.raises(WebSocketDenialResponse) as refused, client.websocket_connect(
                "/api/chat", headers=auth):
            pass
        with client.websocket_connect("/ws", headers=auth) as reference:
            said = reference.receive_json()
            closed = reference.receive()
    finally:
        held.release()
    answer = refused.value
    assert answer.status_code == 503
    assert answer.headers["Retry-After"] == str(RETRY_AFTER_S)
    body = answer.json()
    assert body["type"] == "busy" and "replica" in body["message"]
    assert said["type"] == "busy" and closed["code"] == 1013
