"""`serve --cluster` on a local Ray cluster: two tiny replicas behind one address hold two
conversations at once; a third is told `busy`; when one ends, its replica takes the next.

Needs the `cluster` extra (ray[serve]); skipped without it. About 40 s on a 2-core machine
(Ray's start and the replicas' loading are most of it).
"""

from __future__ import annotations

import asyncio
import time

import pytest

pytest.importorskip("ray.serve")

from app.conversation.config import ConversationConfig
from app.engine.speech_engine import EngineOptions
from app.wire import events as wire
from app.wire.client import AudioFrame, EngineClient, ServerBusy, Unauthorized
from tests.ports import free_port
from tests.server.helpers import TOKEN, collect, of, tone

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster_url(tiny_folder):
    import ray
    from ray import serve

    from app.server.cluster import ClusterSettings, deploy, start_ray

    settings = ClusterSettings(
        conversation=ConversationConfig(model_id="tiny", device="cpu",
                                        custom_folder=str(tiny_folder)),
        engine_options=EngineOptions(seed=1, chunk_limit=16), token=TOKEN,
        min_replicas=2, max_replicas=2, gpus_per_replica=0, cpus_per_replica=0.5,
        host="127.0.0.1", port=free_port())
    started = time.monotonic()
    start_ray(None, num_cpus=2)  # as serve --cluster starts a local one
    up = time.monotonic()
    try:
        deploy(settings)
        print(f"\nRay started in {up - started:.1f} s; two replicas deployed in "
              f"{time.monotonic() - up:.1f} s")
        yield f"http://127.0.0.1:{settings.port}"
    finally:
        serve.shutdown()
        ray.shutdown()


async def _busy_api_chat(url: str) -> tuple[int, str | None, dict]:
    """/api/chat's handshake refused: its status, Retry-After and JSON body."""
    import json

    import aiohttp

    headers = {"Authorization": f"Bearer {TOKEN}", "Connection": "Upgrade",
               "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
               "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session, \
            session.get(url + "/api/chat", headers=headers) as answer:
        body = await answer.read()
        return answer.status, answer.headers.get("Retry-After"), json.loads(body or b"{}")


def test_two_replicas_two_conversations_and_the_third_is_busy(cluster_url):
    async def main():
        first = await EngineClient.connect(cluster_url, TOKEN)
        second = await EngineClient.connect(cluster_url, TOKEN)
        with pytest.raises(ServerBusy) as busy:
            await EngineClient.connect(cluster_url, TOKEN)
        with pytest.raises(Unauthorized):
            await EngineClient.connect(cluster_url, "wrong")
        chat = await _busy_api_chat(cluster_url)
        heard = []
        for client in (first, second):  # both talk at once
            await client.send_span("a fact", "notes")
            for i in range(3):
                await client.send_frame(tone(i))
        for client in (first, second):
            heard.append(await collect(client, lambda ev: len(of(AudioFrame, ev)) == 3
                                       and of(wire.Span, ev), timeout=60))
        await first.close()
        deadline = time.monotonic() + 30
        while True:  # its replica frees within moments, then takes the next conversation
            try:
                third = await EngineClient.connect(cluster_url, TOKEN)
                break
            except ServerBusy:
                assert time.monotonic() < deadline, "the freed replica never took a new one"
                await asyncio.sleep(0.2)
        await third.close()
        await second.close()
        return busy.value.busy, heard, chat

    busy, heard, chat = asyncio.run(main())
    assert "all 2 replica(s) hold a conversation" in busy.message and busy.retry_after_s
    # moshi's /api/chat is refused before the upgrade, as `serve` refuses it.
    status, retry_after, body = chat
    assert status == 503 and retry_after and body["type"] == "busy", chat
    for events in heard:
        assert [a.index for a in of(AudioFrame, events)] == [0, 1, 2]
        assert of(wire.Span, events)[0].source == "notes"


def test_a_local_cluster_listens_on_the_loopback_only(cluster_url):
    """`serve --cluster` without a cluster to join starts Ray on the loopback: its nodes and
    its control store are not reachable from the network (Ray's default is the machine's
    address, every port on every interface)."""
    import ray

    assert {node["NodeManagerAddress"] for node in ray.nodes()} == {"127.0.0.1"}
    assert ray.get_runtime_context().gcs_address.startswith("127.0.0.1:")

