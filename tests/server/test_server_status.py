"""`/health` and `/metrics` report conversations, frames and spans; the token guards every
route but /health; TLS serves with a given certificate."""

from __future__ import annotations

import asyncio
import re
import ssl
import subprocess
from pathlib import Path

import aiohttp
import pytest

from app.server.config import ServerConfig
from app.server.web_app import EngineServer
from app.wire.client import AudioFrame, ConnectError, EngineClient
from tests.server.helpers import TOKEN, collect, health, of, run_server, tone, wait_until_free


def _sample(text: str, name: str) -> float:
    found = re.search(rf"^contextspan_{re.escape(name)} (\S+)$", text, re.M)
    assert found, f"{name} not in /metrics"
    return float(found.group(1))


def test_health_and_metrics_count_sessions_frames_and_spans(tiny_host):
    frames = 4

    async def body(server, url):
        before = await health(url)
        async with await EngineClient.connect(url, TOKEN) as client:
            during = await health(url)
            await client.send_span("a fact to remember", "notes")
            for i in range(frames):
                await client.send_frame(tone(i))
            await collect(client, lambda ev: len(of(AudioFrame, ev)) == frames)
            # A frame's statistics follow its audio: counted moments after it came back.
            for _ in range(600):
                if (await health(url))["frames_total"] == frames:
                    break
                await asyncio.sleep(0.05)
        await wait_until_free(url)
        after = await health(url)
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{url}/metrics") as refused:
                status = refused.status
            async with session.get(f"{url}/metrics",
                                   headers={"Authorization": f"Bearer {TOKEN}"}) as response:
                text = await response.text()
                kind = response.content_type
        return before, during, after, status, text, kind

    before, during, after, refused, text, kind = run_server(tiny_host, body)
    assert before == {**before, "status": "ready", "model": "tiny", "device": "cpu",
                      "busy": False, "sessions_total": 0}
    assert during["busy"]
    assert after["sessions_total"] == 1 and after["frames_total"] == frames
    assert refused == 401 and kind == "text/plain"
    assert _sample(text, 'sessions_total{protocol="reference"}') == 1
    assert _sample(text, "sessions_active") == 0
    assert _sample(text, "frame_ms_count") == frames
    assert _sample(text, 'frame_ms_bucket{le="+Inf"}') == frames
    assert _sample(text, 'spans_total{outcome="injected"}') == 1
    assert _sample(text, "late_frames_total") >= 0
    assert "# TYPE contextspan_frame_ms histogram" in text


def test_every_route_but_health_needs_the_token(tiny_host):
    async def body(server, url):
        statuses = {}
        async with aiohttp.ClientSession() as session:
            for path in ("/ws", "/api/chat", "/metrics", "/health"):
                async with session.get(url + path) as response:
                    statuses[path] = response.status
            async with session.get(f"{url}/metrics?token=nope") as response:
                statuses["wrong"] = response.status
            async with session.get(f"{url}/metrics?token={TOKEN}") as response:
                statuses["query"] = response.status
        return statuses, server.metrics.unauthorized

    statuses, unauthorized = run_server(tiny_host, body)
    assert statuses == {"/ws": 401, "/api/chat": 401, "/metrics": 401, "/health": 200,
                        "wrong": 401, "query": 200}
    assert unauthorized == 4


@pytest.fixture(scope="module")
def certificate(tmp_path_factory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True, timeout=60)
    return cert, key


def test_tls_with_a_given_certificate(tiny_host, certificate):
    import asyncio

    cert, key = certificate

    async def main():
        server = EngineServer(tiny_host, ServerConfig(port=0, token=TOKEN, ssl_cert=cert,
                                                      ssl_key=key))
        url = await server.start()
        try:
            trusted = ssl.create_default_context(cafile=str(cert))
            async with await EngineClient.connect(url, TOKEN, ssl=trusted) as client:
                await client.send_frame(tone(0))
                heard = await collect(client, lambda ev: of(AudioFrame, ev))
            with pytest.raises(ConnectError):  # a client that does not trust it
                await EngineClient.connect(url, TOKEN, timeout=10)
            return url, heard
        finally:
            await server.stop()

    url, heard = asyncio.run(main())
    assert url.startswith("https://") and of(AudioFrame, heard)
