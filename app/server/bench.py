"""Numbers for the server (`bench server`): what the network path adds, what a conversation
costs on the wire, and how many conversations this machine holds at once.

1. Round trip per frame, one frame in flight at the microphone's pace (80 ms): through a
   local engine (push a frame, get its reply from the event queue), then through a server on
   127.0.0.1 (`/ws` with float32 PCM, `/ws` with Opus as the app's client asks for it,
   `/api/chat` with Opus). The network path adds the difference.
2. Bandwidth per conversation both ways, from the payload bytes on the wire (audio and JSON
   messages; WebSocket and TCP/IP headers not counted): Opus on /api/chat and /ws, PCM on
   /ws; and /ws with Opus as the app's client speaks it, per stream: audio, text (the
   model's and the user's words, spans) and control (the rest of the JSON). With `--asr`
   the server recognises the user's words (`serve --asr`), and the same conversation is
   measured with each word sent once (`words`, what the app asks for) and event by event
   (a `text` and the whole utterance's `user_text` a word, what other clients get).
3. What Opus adds to the delay: its own (the decoded audio lags what was encoded; found by
   cross-correlation, both ways of a round trip), and the CPU time to encode and decode a
   frame.
4. Conversations at once: k servers in their own processes (as `serve --cluster` replicas
   are, one torch thread each), k clients talking at once at the microphone's pace; a
   frame is late when its engine time exceeds 80 ms (the servers' /metrics). The largest k
   with no late frame is the answer.
Timings on a shared machine are noisy: they are medians and p95 over one run, each number
beside the one it is compared with.
"""

from __future__ import annotations

import asyncio
import os
import re
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from app.conversation.config import NONE, ConversationConfig
from app.engine import events as ev
from app.engine.speech_engine import EngineOptions
from app.frames import FRAME_S, FRAME_SAMPLES, SAMPLE_RATE
from app.paths import REPO_ROOT
from app.server.config import ServerConfig
from app.server.engine_host import ConversationChoice, EngineHost
from app.server.web_app import EngineServer

TOKEN = "bench"
ROUNDS = 5


def _frame(index: int) -> npt.NDArray[np.float32]:
    t = (np.arange(FRAME_SAMPLES) + index * FRAME_SAMPLES) / SAMPLE_RATE
    return (0.1 * np.sin(2 * np.pi * 220 * t)).astype(np.float32)


def _stats(values: list[float]) -> dict[str, Any]:
    if not values:
        return {"median": None, "p95": None, "n": 0}
    return {"median": round(float(np.median(values)), 2),
            "p95": round(float(np.percentile(values, 95)), 2), "n": len(values)}


def _pace(start: float, index: int) -> float:
    return max(0.0, start + (index + 1) * FRAME_S - time.perf_counter())


def local_round_trips(host: EngineHost, frames: int) -> list[float]:
    """Push a frame into a conversation on the host's engine (no network), wait for its
    reply: milliseconds each."""
    engine = host.open_row(ConversationChoice())
    engine.start()
    try:
        while not isinstance(engine.events.get(timeout=600), ev.EngineReady):
            pass
        out, start = [], time.perf_counter()
        for i in range(frames):
            sent = time.perf_counter()
            engine.push_frame(_frame(i), timeout=10)
            while not isinstance(engine.events.get(timeout=60), ev.AudioOut):
                pass
            out.append((time.perf_counter() - sent) * 1000.0)
            time.sleep(_pace(start, i))
        return out
    finally:
        engine.stop()


async def _reference_round_trips(url: str, frames: int, audio: str = "pcm",
                                 streams: dict[str, Counter[str]] | None = None,
                                 words: bool = True) -> tuple[list[float], int, int]:
    """`/ws` as the app's client speaks it; `audio` "opus": as it asks for it (its first
    frame goes as PCM, until the server's answer); `words`: the words once, as it asks for
    them. `streams`: the payload bytes per stream are added to it ("up/audio", ...)."""
    from app.wire.client import AudioFrame, EngineClient

    async with await EngineClient.connect(url, TOKEN, audio=audio, words=words) as client:
        start = time.perf_counter()
        for i in range(frames):
            await client.send_frame_encoded(_frame(i))
            while not isinstance(await client.receive(timeout=60), AudioFrame):
                pass
            await asyncio.sleep(_pace(start, i))
        if audio != "pcm" and client.audio_codec != audio:
            raise RuntimeError(f"the server did not take {audio}: {client.audio_refused}")
        if streams is not None:
            for way, name in (("sent", "up"), ("received", "down")):
                streams[name].update(client.stream_bytes[way])
        return list(client.round_trips_ms), client.bytes_sent, client.bytes_received


def opus_delay(frames: int = 50) -> dict[str, Any]:
    """Opus's own delay (samples and ms, one way) and the CPU per frame to encode and to
    decode, over a voiced, wavering tone."""
    from app.wire.opus import OpusFrameReader, OpusFrameWriter

    t = np.arange(frames * FRAME_SAMPLES) / SAMPLE_RATE
    sent = (0.3 * np.sin(2 * np.pi * (180 + 40 * np.sin(2 * np.pi * 3 * t)) * t)).astype(
        np.float32)
    writer, reader = OpusFrameWriter(), OpusFrameReader()
    encode_ms, decode_ms, heard = [], [], []
    for i in range(frames):
        started = time.perf_counter()
        pages = writer.pages(sent[i * FRAME_SAMPLES:(i + 1) * FRAME_SAMPLES])
        encoded = time.perf_counter()
        heard += reader.frames(pages)
        encode_ms.append((encoded - started) * 1000.0)
        decode_ms.append((time.perf_counter() - encoded) * 1000.0)
    got = np.concatenate(heard)
    lag = max(range(FRAME_SAMPLES), key=lambda d: float(np.dot(sent[:len(sent) - d], got[d:])))
    return {"samples": lag, "ms_one_way": round(lag / SAMPLE_RATE * 1000.0, 2),
            "encode_ms": _stats(encode_ms), "decode_ms": _stats(decode_ms)}


async def _moshi_round_trips(url: str, frames: int) -> tuple[list[float], int, int]:
    import aiohttp
    import sphn

    writer = sphn.OpusStreamWriter(SAMPLE_RATE)
    chat = url.replace("http", "ws", 1) + f"/api/chat?token={TOKEN}"
    sent_bytes = received_bytes = 0
    rtts: list[float] = []
    async with aiohttp.ClientSession() as session, session.ws_connect(chat) as ws:
        handshake = await ws.receive(timeout=600)
        received_bytes += len(handshake.data)
        start = time.perf_counter()
        for i in range(frames):
            page = b"\x01" + writer.append_pcm(_frame(i))
            sent = time.perf_counter()
            await ws.send_bytes(page)
            sent_bytes += len(page)
            while True:
                message = await ws.receive(timeout=60)
                received_bytes += len(message.data)
                if message.data[:1] == b"\x01":
                    break
            rtts.append((time.perf_counter() - sent) * 1000.0)
            await asyncio.sleep(_pace(start, i))
    return rtts, sent_bytes, received_bytes


async def transport_round_trips(frames: int) -> list[float]:
    """The WebSocket alone on 127.0.0.1: an aiohttp server that echoes each 7680-byte PCM
    frame, no engine. What the network path costs at the least, without the noise of
    engine steps."""
    import aiohttp
    from aiohttp import web

    async def echo(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(compress=False)
        await ws.prepare(request)
        async for message in ws:
            await ws.send_bytes(message.data)
        return ws

    app = web.Application()
    app.router.add_get("/echo", echo)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    out: list[float] = []
    try:
        async with aiohttp.ClientSession() as session, session.ws_connect(
                f"ws://127.0.0.1:{port}/echo", compress=0) as ws:
            for i in range(frames):
                sent = time.perf_counter()
                await ws.send_bytes(_frame(i).tobytes())
                await ws.receive(timeout=60)
                out.append((time.perf_counter() - sent) * 1000.0)
    finally:
        await runner.cleanup()
    return out


def _streams() -> dict[str, Counter[str]]:
    return {"up": Counter(), "down": Counter()}


async def network_round_trips(host: EngineHost, frames: int,
                              streams: dict[str, dict[str, Counter[str]]]) -> dict[str, Any]:
    """Each path in turn; `streams` gains /ws Opus's bytes per stream ("ws_opus", and with
    the server's recognition "ws_opus_event_by_event" too)."""
    server = EngineServer(host, ServerConfig(port=0, token=TOKEN))
    url = await server.start()

    async def free() -> None:
        while host.busy:  # the last conversation's engine is still stopping
            await asyncio.sleep(0.02)

    try:
        reference = await _reference_round_trips(url, frames)
        await free()
        opus = await _reference_round_trips(url, frames, "opus", streams["ws_opus"])
        if "ws_opus_event_by_event" in streams:
            await free()
            await _reference_round_trips(url, frames, "opus",
                                         streams["ws_opus_event_by_event"], words=False)
        await free()
        moshi = await _moshi_round_trips(url, frames)
        return {"reference": reference, "opus": opus, "moshi": moshi}
    finally:
        await server.stop()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _start_servers(count: int, model: str, device: str, chunk_limit: int | None,
                   folder: Path | None, threads: int
                   ) -> tuple[list[subprocess.Popen[str]], list[str]]:
    # `threads` torch threads per server, as Ray gives a replica with --cpus-per-replica:
    # k servers on c cores then share the cores instead of fighting over them.
    env = {**os.environ, "CONTEXTSPAN_SERVER_TOKEN": TOKEN, "OMP_NUM_THREADS": str(threads)}
    processes, urls = [], []
    for _ in range(count):
        port = _free_port()
        command = [sys.executable, "-m", "app.server.cli", "--model", model, "--device", device,
                   "--port", str(port)]
        if chunk_limit:
            command += ["--chunk-limit", str(chunk_limit)]
        if folder is not None:
            command += ["--folder", str(folder)]
        processes.append(subprocess.Popen(command, cwd=REPO_ROOT, env=env,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                          text=True))
        urls.append(f"http://127.0.0.1:{port}")
    for process in processes:  # each says where it serves once its model is loaded
        deadline = time.monotonic() + 600
        assert process.stderr is not None  # a PIPE, as opened above
        while time.monotonic() < deadline:
            line = process.stderr.readline()
            if not line:
                raise RuntimeError("a bench server ended before it served")
            if "serving" in line:
                break
    return processes, urls


async def _late_frames(url: str) -> tuple[int, int]:
    import aiohttp

    async with aiohttp.ClientSession() as session, session.get(
            f"{url}/metrics", headers={"Authorization": f"Bearer {TOKEN}"}) as response:
        text = await response.text()

    def sample(name: str) -> int:
        found = re.search(rf"^contextspan_{name} (\S+)$", text, re.M)
        return int(float(found.group(1))) if found else 0

    return sample("late_frames_total"), sample("frame_ms_count")


async def _talk_at_once(urls: list[str], frames: int) -> dict[str, Any]:
    runs = await asyncio.gather(*(_reference_round_trips(url, frames) for url in urls))
    counts = await asyncio.gather(*(_late_frames(url) for url in urls))
    rtts = [rtt for run in runs for rtt in run[0]]
    return {"conversations": len(urls), "late_frames": sum(c[0] for c in counts),
            "frames": sum(c[1] for c in counts), "rtt_ms": _stats(rtts)}


def concurrent_conversations(model: str, device: str, frames: int, most: int,
                             chunk_limit: int | None, folder: Path | None = None,
                             threads: int = 1) -> list[dict[str, Any]]:
    """k = 1, 2, ... servers in their own processes, k conversations at once, until a
    frame is late (or `most`)."""
    rows = []
    for count in range(1, most + 1):
        processes, urls = _start_servers(count, model, device, chunk_limit, folder, threads)
        try:
            row = asyncio.run(_talk_at_once(urls, frames))
        finally:
            for process in processes:
                process.terminate()
            for process in processes:
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    process.kill()
        rows.append(row)
        if row["late_frames"]:
            break
    return rows


def run_server_bench(model: str = "tiny", device: str = "cpu", frames: int = 125,
                     most_conversations: int = 4, chunk_limit: int | None = 16,
                     folder: Path | None = None, threads: int = 1,
                     asr: str | None = None) -> dict[str, Any]:
    """`threads`: torch threads of this process and of each server. On a shared CPU more
    than one makes every step wait for the slowest thread (OpenMP's barriers). `asr`: the
    server's recognition (an STT model, as `serve --asr`)."""
    import torch

    torch.set_num_threads(threads)
    speech = ConversationConfig(model_id=model, device=device,
                                custom_folder=str(folder) if folder else None,
                                stt_model=asr or NONE)
    host = EngineHost.load(speech, EngineOptions(seed=1, chunk_limit=chunk_limit))
    # Rounds of each path in turn: what else loads the machine weighs on all three alike.
    per_round = max(1, frames // ROUNDS)
    frames = per_round * ROUNDS
    local: list[float] = []
    reference_rtts: list[float] = []
    moshi_rtts: list[float] = []
    ws_opus_rtts: list[float] = []
    ws_sent = ws_received = opus_sent = opus_received = ws_opus_sent = ws_opus_received = 0
    streams = {"ws_opus": _streams()}
    if asr:
        streams["ws_opus_event_by_event"] = _streams()
    for _ in range(ROUNDS):
        local += local_round_trips(host, per_round)
        network = asyncio.run(network_round_trips(host, per_round, streams))
        reference_rtts += network["reference"][0]
        ws_sent += network["reference"][1]
        ws_received += network["reference"][2]
        moshi_rtts += network["moshi"][0]
        ws_opus_rtts += network["opus"][0]
        ws_opus_sent += network["opus"][1]
        ws_opus_received += network["opus"][2]
        opus_sent += network["moshi"][1]
        opus_received += network["moshi"][2]
    seconds = frames * FRAME_S
    local_stats = _stats(local)

    def added(values: list[float]) -> dict[str, Any]:
        stats = _stats(values)
        return {k: round(stats[k] - local_stats[k], 2) for k in ("median", "p95")}

    rows = (concurrent_conversations(model, device, frames, most_conversations, chunk_limit,
                                     folder, threads) if most_conversations > 0 else [])
    held = max((r["conversations"] for r in rows if not r["late_frames"]), default=0)
    return {
        "model": host.model_id, "device": host.device, "frames": frames,
        "cpu_count": os.cpu_count(), "torch_threads": threads,
        "load_average": os.getloadavg()[0],
        "round_trip_ms": {"local_engine": local_stats, "ws_pcm": _stats(reference_rtts),
                          "ws_opus": _stats(ws_opus_rtts), "api_chat_opus": _stats(moshi_rtts)},
        "added_by_network_ms": {"ws_pcm": added(reference_rtts),
                                "ws_opus": added(ws_opus_rtts),
                                "api_chat_opus": added(moshi_rtts)},
        "opus_delay": opus_delay(),
        "websocket_echo_ms": _stats(asyncio.run(transport_round_trips(frames))),
        "bytes_per_second": {
            "api_chat_opus": {"up": round(opus_sent / seconds), "down": round(opus_received
                                                                               / seconds)},
            "ws_opus": {"up": round(ws_opus_sent / seconds),
                        "down": round(ws_opus_received / seconds)},
            # The same less each connection's first frame, which goes as PCM until the
            # server's answer (one frame a conversation: what a long one pays).
            "ws_opus_after_first_frame": {
                "up": round((ws_opus_sent - ROUNDS * FRAME_SAMPLES * 4) / seconds),
                "down": round(ws_opus_received / seconds)},
            "ws_pcm": {"up": round(ws_sent / seconds), "down": round(ws_received / seconds)}},
        "server_recognition": asr,
        # /ws with Opus per stream, each way: what the app's link line adds up.
        "bytes_per_second_by_stream": {
            path: {way: {stream: round(count / seconds)
                         for stream, count in sorted(counts[way].items())}
                   for way in ("up", "down")}
            for path, counts in streams.items()},
        "conversations_at_once": rows,
        "conversations_without_late_frames": held,
    }


def format_server_bench(result: dict[str, Any]) -> str:
    lines = [f"{result['model']} on {result['device']} ({result['cpu_count']} CPUs, "
             f"{result['torch_threads']} torch thread(s) per process, load "
             f"{result['load_average']:.1f}), {result['frames']} frames at 80 ms"]
    for path, stats in result["round_trip_ms"].items():
        lines.append(f"  round trip {path:14} median {stats['median']:8.2f} ms   "
                     f"p95 {stats['p95']:8.2f} ms")
    for path, stats in result["added_by_network_ms"].items():
        lines.append(f"  added by {path:16} median {stats['median']:8.2f} ms   "
                     f"p95 {stats['p95']:8.2f} ms")
    echo = result["websocket_echo_ms"]
    lines.append(f"  websocket echo alone (no engine)  median {echo['median']:8.2f} ms   "
                 f"p95 {echo['p95']:8.2f} ms")
    for path, rate in result["bytes_per_second"].items():
        lines.append(f"  {path:14} up {rate['up'] * 8 / 1000:7.1f} kbit/s   down "
                     f"{rate['down'] * 8 / 1000:7.1f} kbit/s (payloads: audio and messages)")
    recognition = result.get("server_recognition")
    for path, ways in result.get("bytes_per_second_by_stream", {}).items():
        lines.append(f"  {path} by stream" + (f" (recognition {recognition} on the server)"
                                               if recognition else "") + ":")
        for way in ("down", "up"):
            rates = ways[way]
            parts = "   ".join(f"{stream} {count * 8 / 1000:6.1f}" for stream, count in
                               rates.items())
            total = sum(rates.values()) * 8 / 1000
            lines.append(f"    {way:4} {total:6.1f} kbit/s = {parts}")
    delay = result["opus_delay"]
    lines.append(f"  Opus's own delay {delay['ms_one_way']:.1f} ms each way "
                 f"({delay['samples']} samples); encode median {delay['encode_ms']['median']} "
                 f"ms, decode median {delay['decode_ms']['median']} ms a frame")
    for row in result["conversations_at_once"]:
        lines.append(f"  {row['conversations']} at once: {row['late_frames']} late of "
                     f"{row['frames']} frames, round trip median {row['rtt_ms']['median']} ms "
                     f"p95 {row['rtt_ms']['p95']} ms")
    lines.append(f"  conversations held without late frames: "
                 f"{result['conversations_without_late_frames']}")
    return "\n".join(lines)


if __name__ == "__main__":
    import json

    outcome = run_server_bench(frames=int(sys.argv[1]) if len(sys.argv) > 1 else 125)
    print(format_server_bench(outcome))
    print(json.dumps(outcome))
