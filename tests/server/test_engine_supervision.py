"""A server whose engine fails says why, serves again, and tells the truth in between
(issue 33; app/server/supervisor.py).

The tiny model's real server, with a fault put into the real engine's step:
- an engine that cannot start (out of memory in its warm-up): `serve` exits 1 with the
  reason, at once;
- a step that raises mid-conversation: the client hears the reason; `/health` says
  "restarting" with it and `free_slots` 0, `/metrics` says the engine is down, a client who
  knocks is told "restarting" (503); the new engine warms up on the same weights, and the
  next client gets a conversation;
- a step that hangs: the watchdog tells the client why, and the server stops (its thread is
  stuck in the device: a fresh process is the only way back), `fatal` saying why.
"""

from __future__ import annotations

import asyncio
import json
import threading

import aiohttp
import pytest
import torch

from app.checkpoints.catalog import get_manifest
from app.checkpoints.loader import load_checkpoint
from app.engine.local_engine import LocalEngine
from app.engine.speech_engine import EngineOptions
from app.server.config import ServerConfig
from app.server.engine_host import EngineHost
from app.server.web_app import EngineServer
from app.wire import events as wire
from app.wire.client import AudioFrame, Disconnected, EngineClient, ServerBusy
from tests.engine.step_fault import StepFault
from tests.server.helpers import TOKEN, collect, of, run_server, tone

OOM = "CUDA out of memory. Tried to allocate 2.00 GiB"
WAIT_S = 120.0


async def _talk(url: str, frames: int, first: int = 0) -> list:
    client = await EngineClient.connect(url, TOKEN)
    try:
        for i in range(first, first + frames):
            await client.send_frame(tone(i))
        return await collect(client, lambda ev: len(of(AudioFrame, ev)) == frames
                             or bool(of(wire.Error, ev)))
    finally:
        await client.close()


async def _get(url: str, path: str) -> tuple[int, str]:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with aiohttp.ClientSession() as session, \
            session.get(f"{url}{path}", headers=headers) as response:
        return response.status, await response.text()


async def _health(url: str) -> dict:
    async with aiohttp.ClientSession() as session, session.get(f"{url}/health") as response:
        return await response.json()


async def _until(url: str, status: str) -> dict:
    for _ in range(int(WAIT_S / 0.05)):
        body = await _health(url)
        if body["status"] == status:
            return body
        await asyncio.sleep(0.05)
    raise AssertionError(f"/health never said {status}: {body}")


def test_an_engine_that_cannot_start_ends_serve_with_the_reason(data_dir, tiny_folder,
                                                                 monkeypatch, capsys):
    from app.server import cli

    def out_of_memory(self) -> None:
        raise torch.OutOfMemoryError(OOM)

    monkeypatch.setattr(LocalEngine, "_warm_up", out_of_memory)
    code = cli.main(["--model", "tiny", "--device", "cpu", "--port", "0"])
    assert code == 1
    assert OOM in capsys.readouterr().err


def test_a_fault_mid_run_is_told_the_server_restarts_its_engine_and_serves_again(
        tiny_folder, monkeypatch):
    checkpoint = load_checkpoint(get_manifest("tiny"), tiny_folder, device="cpu")
    host = EngineHost(checkpoint, EngineOptions(seed=1, chunk_limit=16), slots=2)
    host.wait_warm()
    first_engine = host.engine
    fault = StepFault(first_engine, 5, RuntimeError("CUDA error: an illegal memory access"))
    hold_the_new_one = threading.Event()  # the replacement warms up once the test has looked
    warm_up = LocalEngine._warm_up

    def held_warm_up(self) -> None:
        hold_the_new_one.wait(WAIT_S)
        warm_up(self)

    monkeypatch.setattr(LocalEngine, "_warm_up", held_warm_up)

    async def main(server: EngineServer, url: str):
        events = await _talk(url, 8)
        errors = of(wire.Error, events)
        assert errors and "illegal memory access" in errors[0].message, events[-3:]
        restarting = await _until(url, "restarting")
        assert restarting["free_slots"] == 0
        assert "illegal memory access" in restarting["message"]
        assert restarting["engine_failures_total"] == 1
        status, metrics = await _get(url, "/metrics")
        assert status == 200 and "contextspan_engine_up 0" in metrics
        with pytest.raises(ServerBusy):
            await EngineClient.connect(url, TOKEN)
        status, body = await _get(url, "/api/chat")  # what the 503 says
        assert status == 503 and "restarting after a failure" in json.loads(body)["message"]
        hold_the_new_one.set()
        ready = await _until(url, "ready")
        assert ready["free_slots"] == 2 and ready["engine_restarts_total"] == 1
        again = await _talk(url, 6)
        assert len(of(AudioFrame, again)) == 6 and not of(wire.Error, again)
        status, metrics = await _get(url, "/metrics")
        assert "contextspan_engine_up 1" in metrics
        assert "contextspan_engine_restarts_total 1" in metrics

    try:
        run_server(host, main)
        assert fault.calls >= 5
        assert host.engine is not first_engine and first_engine.finished.is_set()
        assert host.fatal is None
    finally:
        hold_the_new_one.set()
        assert host.close()


def test_a_hung_step_is_told_and_the_server_stops_for_a_fresh_process(tiny_folder):
    checkpoint = load_checkpoint(get_manifest("tiny"), tiny_folder, device="cpu")
    host = EngineHost(checkpoint, EngineOptions(seed=1, chunk_limit=16, stall_s=1.0))
    host.wait_warm()
    fault = StepFault(host.engine, 3, None)
    heard: list = []

    async def main():
        server = EngineServer(host, ServerConfig(host="127.0.0.1", port=0, token=TOKEN))
        talking: list[asyncio.Task] = []

        def ready(url: str) -> None:
            talking.append(asyncio.get_running_loop().create_task(_talk(url, 6)))

        await asyncio.wait_for(server.serve_until_signalled(ready), WAIT_S)  # it stops
        heard.extend(await asyncio.wait_for(talking[0], WAIT_S))

    try:
        asyncio.run(main())
        assert host.fatal is not None and "stuck" in host.fatal
        assert "StallError" in host.fatal
        errors = of(wire.Error, heard)
        assert (errors and "StallError" in errors[0].message) or of(Disconnected, heard)
    finally:
        fault.release.set()
        host.close()
