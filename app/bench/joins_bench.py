"""`bench joins`: what conversations joining and leaving cost the one already talking.

A `serve --slots N` server in its own process (or `--url`: one already running). One long
conversation talks at the microphone's pace (a frame every 80 ms, real time) for the whole
run, first alone, then while `--joiners` others come, one after another and up to N-1 at
once: each connects (its conversation starts: reset, Mimi join, voice prompt and persona
read in), every `--clone-every`-th clones a `--voice-seconds` recording (a new start in that
voice), every `--reset-every`-th resets once (a new conversation on the same connection),
each talks `--join-frames` frames, then leaves.

Printed (each figure as a JSON line the moment it exists, then a summary):
- `gaps_alone_ms` / `gaps_joining_ms`: the long conversation's gaps between two reply frames
  as they arrive at its client, p50 / p99 / max, alone and while the others join: a join
  that stops the others shows as a gap. The verdict: p99 while joining within one frame
  (80 ms) of p99 alone;
- `ready_ms`: each joiner's time from connecting (or cloning, or resetting) to its `ready`
  (its start is in: what the joiner waits), p50 / p95 / max;
- the frames the long conversation sent and got back (equal: nothing lost).
Wall-clock figures: run it on an idle machine, and compare runs of one session.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from app.bench.requests import JOINS_TOKEN, JoinsBench
from app.frames import FRAME_S, FRAME_SAMPLES, SAMPLE_RATE
from app.paths import REPO_ROOT

TOKEN = JOINS_TOKEN
SERVE_TIMEOUT_S = 600.0
CONNECT_S = 120.0  # a connection is answered once its conversation is ready


def _emit(record: dict[str, Any]) -> None:
    print(json.dumps(record), flush=True)


def _tone(index: int, hz: float = 220.0) -> np.ndarray:
    t = (np.arange(FRAME_SAMPLES) + index * FRAME_SAMPLES) / SAMPLE_RATE
    return (0.1 * np.sin(2 * np.pi * hz * t)).astype(np.float32)


def _voice(seconds: float, seed: int) -> np.ndarray:
    """A stand-in recording: a wavering voiced tone with noise, `seconds` long."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * SAMPLE_RATE)) / SAMPLE_RATE
    pitch = 140 + 30 * np.sin(2 * np.pi * 0.7 * t)
    voiced = 0.2 * np.sin(2 * np.pi * np.cumsum(pitch) / SAMPLE_RATE)
    return (voiced + rng.normal(0, 0.02, t.size)).astype(np.float32)


def _spread(values: list[float], high: str = "p99") -> dict[str, float | int | None]:
    if not values:
        return {"p50": None, high: None, "max": None, "n": 0}
    pct = 99 if high == "p99" else 95
    return {"p50": round(float(np.percentile(values, 50)), 1),
            high: round(float(np.percentile(values, pct)), 1),
            "max": round(float(max(values)), 1), "n": len(values)}


def start_server(model: str, slots: int, device: str, chunk_limit: int | None,
                 extra: list[str]) -> tuple[subprocess.Popen[str], str]:
    """`serve --slots N` in its own process; returns it and its URL once it serves."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [sys.executable, "main.py", "serve", "--model", model, "--device", device,
               "--slots", str(slots), "--port", str(port), *extra]
    if chunk_limit:
        command += ["--chunk-limit", str(chunk_limit)]
    process = subprocess.Popen(command, cwd=REPO_ROOT, text=True, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE,
                               env={**os.environ, "CONTEXTSPAN_SERVER_TOKEN": TOKEN})
    assert process.stderr is not None
    deadline = time.monotonic() + SERVE_TIMEOUT_S
    while time.monotonic() < deadline:
        line = process.stderr.readline()
        if not line:
            raise RuntimeError(f"the server ended before it served (exit {process.wait()})")
        if line.startswith("serving"):
            return process, f"http://127.0.0.1:{port}"
    process.kill()
    raise RuntimeError(f"the server did not serve within {SERVE_TIMEOUT_S:g} s")


class LongConversation:
    """The conversation already talking: a frame every 80 ms, each reply's arrival kept."""

    def __init__(self) -> None:
        self.arrivals: list[float] = []
        self.sent = 0
        self.stop = asyncio.Event()

    async def run(self, url: str) -> None:
        from app.wire.client import AudioFrame, Disconnected, EngineClient

        client = await EngineClient.connect(url, TOKEN, timeout=CONNECT_S)

        async def receive() -> None:
            while True:
                event = await client.receive()
                if isinstance(event, AudioFrame):
                    self.arrivals.append(time.monotonic())
                elif isinstance(event, Disconnected):
                    return

        receiver = asyncio.create_task(receive())
        start = time.monotonic()
        try:
            while not self.stop.is_set():
                await client.send_frame(_tone(self.sent))
                self.sent += 1
                await asyncio.sleep(max(0.0, start + self.sent * FRAME_S - time.monotonic()))
            deadline = time.monotonic() + 30.0
            while len(self.arrivals) < self.sent and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
        finally:
            await client.close()
            receiver.cancel()

    def gaps_ms(self, since: float, until: float) -> list[float]:
        times = [t for t in self.arrivals if since <= t <= until]
        return [(b - a) * 1000.0 for a, b in zip(times, times[1:], strict=False)]


async def _until_ready(client: Any, timeout: float = 120.0) -> None:
    """Until the conversation's `ready` (after a clone: `cloned`, which stands for it)."""
    from app.wire import events as wire
    from app.wire.client import Disconnected

    deadline = time.monotonic() + timeout
    while True:
        event = await client.receive(timeout=max(0.01, deadline - time.monotonic()))
        if isinstance(event, wire.Ready) or (isinstance(event, wire.UnknownEvent)
                                             and event.type == "cloned"):
            return
        if isinstance(event, (Disconnected, wire.Error)):
            raise RuntimeError(f"a joiner's conversation did not start: {event}")


async def _join(url: str, index: int, frames: int, clone_s: float | None, reset: bool,
                ready_ms: list[float], say: Callable[[dict[str, Any]], None]) -> None:
    from app.wire.client import EngineClient, ServerBusy

    started = time.monotonic()
    client: EngineClient | None = None
    while client is None:
        try:
            client = await EngineClient.connect(url, TOKEN, timeout=CONNECT_S)
        except ServerBusy:  # every slot held: wait for one (not counted as a join's cost)
            await asyncio.sleep(0.1)
            started = time.monotonic()
    try:
        waits = [("connect", (time.monotonic() - started) * 1000.0)]
        if clone_s is not None:
            started = time.monotonic()
            await client.send_clone(_voice(clone_s, index))
            await _until_ready(client)
            waits.append(("clone", (time.monotonic() - started) * 1000.0))
        sent = 0
        for _ in range(frames):
            await client.send_frame(_tone(sent, 300.0 + 10 * index))
            sent += 1
            await asyncio.sleep(FRAME_S)
        if reset:
            started = time.monotonic()
            await client.reset()
            await _until_ready(client)
            waits.append(("reset", (time.monotonic() - started) * 1000.0))
            for _ in range(frames // 2):
                await client.send_frame(_tone(sent))
                sent += 1
                await asyncio.sleep(FRAME_S)
        for kind, ms in waits:
            ready_ms.append(ms)
            say({"joiner": index, "ready_after": kind, "ms": round(ms, 1)})
    finally:
        await client.close()


async def measure(url: str, slots: int, joiners: int, join_frames: int, alone_s: float,
                  clone_every: int, reset_every: int, voice_seconds: float) -> dict[str, Any]:
    long = LongConversation()
    talking = asyncio.create_task(long.run(url))
    while not long.arrivals:  # its conversation started and talks
        if talking.done():
            talking.result()
        await asyncio.sleep(0.05)
    alone_from = time.monotonic()
    await asyncio.sleep(alone_s)
    joining_from = time.monotonic()
    ready_ms: list[float] = []
    room = asyncio.Semaphore(max(1, slots - 1))

    async def one(index: int) -> None:
        async with room:
            clone = voice_seconds if clone_every and index % clone_every == 0 else None
            reset = bool(reset_every) and index % reset_every == reset_every - 1
            await _join(url, index, join_frames, clone, reset, ready_ms, _emit)

    await asyncio.gather(*(one(i) for i in range(joiners)))
    joining_until = time.monotonic()
    long.stop.set()
    await talking
    alone = _spread(long.gaps_ms(alone_from, joining_from))
    joining = _spread(long.gaps_ms(joining_from, joining_until))
    p99_alone, p99_joining = alone["p99"], joining["p99"]
    within = (p99_alone is not None and p99_joining is not None
              and p99_joining <= p99_alone + 1000.0 * FRAME_S)
    return {"gaps_alone_ms": alone, "gaps_joining_ms": joining,
            "p99_within_one_frame": within, "ready_ms": _spread(ready_ms, "p95"),
            "long_frames_sent": long.sent, "long_frames_back": len(long.arrivals),
            "joiners": joiners, "slots": slots}


def run(request: JoinsBench) -> int:
    process = None
    url = request.url
    if url is None:
        process, url = start_server(request.model, request.slots, request.device,
                                    request.chunk_limit, [])
    try:
        result = asyncio.run(measure(url, request.slots, request.joiners, request.join_frames,
                                     request.alone_s, request.clone_every,
                                     request.reset_every, request.voice_seconds))
    finally:
        if process is not None:
            process.terminate()
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
    _emit({"summary": result, "includes": {
        "gaps_*_ms": "the long conversation's gaps between two reply frames at its client "
                     "(network, engine, its own decoding), alone and while others joined",
        "ready_ms": "each joiner from connecting, cloning or resetting to its ready",
    }})
    return 0
