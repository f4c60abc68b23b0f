"""`serve --slots 3` in its own process on the tiny model: three clients converse at once on
one batched engine, spans over the wire; a fourth is answered busy; one that vanishes frees
its slot and a new client takes it, while the others' streams go on untouched."""

from __future__ import annotations

import asyncio

import aiohttp

from app.wire import events as wire
from app.wire.client import AudioFrame, Disconnected, EngineClient, ServerBusy
from tests.serve_process import ServeProcess
from tests.server.helpers import TOKEN, collect, of, run_server, tone

SPANS = ("the capital of australia is canberra", "the moon orbits the earth",
         "water boils at one hundred degrees", "the sky is blue on a clear day")


async def converse(client: EngineClient, first: int, count: int,
                   span: str | None = None) -> list:
    """`count` frames from index `first` (and a span first): every frame's audio back, and
    the span landed."""
    if span is not None:
        await client.send_span(span, "notes")
    for i in range(first, first + count):
        await client.send_frame(tone(i))
    return await collect(client, lambda ev: len(of(AudioFrame, ev)) == count
                         and (span is None or of(wire.Span, ev)))


async def health(session: aiohttp.ClientSession, url: str) -> dict:
    async with session.get(f"{url}/health") as response:
        return await response.json()


async def wait_for_free_slot(session: aiohttp.ClientSession, url: str) -> None:
    while (await health(session, url))["free_slots"] == 0:
        await asyncio.sleep(0.05)


def clean(events: list) -> bool:
    return not of(wire.Error, events) and not of(Disconnected, events)


def test_three_at_once_a_fourth_busy_a_vanished_one_replaced(data_dir, tiny_folder):
    async def main(url: str):
        async with aiohttp.ClientSession() as session:
            clients = [await EngineClient.connect(url, TOKEN) for _ in range(3)]
            first = await asyncio.gather(*(converse(c, 0, 8, SPANS[i])
                                           for i, c in enumerate(clients)))
            busy = None
            try:
                extra = await EngineClient.connect(url, TOKEN)
                await extra.close()
            except ServerBusy as exc:
                busy = exc.busy
            full = await health(session, url)

            async def replace_the_vanished() -> list:
                vanished = clients[2]
                vanished._ws._response.connection.transport.abort()  # no close, no goodbye
                await wait_for_free_slot(session, url)
                async with await EngineClient.connect(url, TOKEN) as newcomer:
                    return await converse(newcomer, 0, 6, SPANS[3])

            # The other two talk on while one vanishes and a newcomer joins and talks.
            a, b, joined = await asyncio.gather(converse(clients[0], 8, 16),
                                                converse(clients[1], 8, 16),
                                                replace_the_vanished())
            async with session.get(f"{url}/metrics",
                                   headers={"Authorization": f"Bearer {TOKEN}"}) as response:
                metrics = await response.text()
            for client in clients[:2]:
                await client.close()
            return first, busy, full, (a, b), joined, metrics

    with ServeProcess(data_dir, TOKEN, args=("--slots", "3")) as server:
        first, busy, full, talking_on, joined, metrics = asyncio.run(
            asyncio.wait_for(main(server.url), 300))

    for events, span in zip(first, SPANS, strict=False):
        assert [a.index for a in of(AudioFrame, events)] == list(range(8))
        assert [s.text for s in of(wire.Span, events)] == [span]  # its own span, nobody else's
        assert clean(events)
    assert busy is not None and "try again" in busy.message
    assert (full["slots"], full["free_slots"], full["busy"]) == (3, 0, True)
    for events in talking_on:  # unaffected: every frame back, in order, no error
        assert [a.index for a in of(AudioFrame, events)] == list(range(8, 24))
        assert clean(events)
    assert [s.text for s in of(wire.Span, joined)] == [SPANS[3]]
    assert [a.index for a in of(AudioFrame, joined)] == list(range(6)) and clean(joined)
    assert "contextspan_slots 3" in metrics
    for row in range(3):
        assert f'contextspan_slot_frames_total{{slot="{row}"}}' in metrics
        assert f'contextspan_slot_frame_ms_p99{{slot="{row}"}}' in metrics
    assert 'contextspan_slot_spans_total{slot="0"} 1' in metrics


def test_ready_tells_the_client_the_span_budget_the_engine_measured(tiny_host):
    """One slot: the longest span, in content tokens, travels in `ready`,
    for the client's LLM side to answer within it."""

    async def body(server, url):
        async with await EngineClient.connect(url, TOKEN) as client:
            return client.ready

    ready = run_server(tiny_host, body)
    manifest_max = tiny_host.checkpoint.manifest.max_span_tokens
    assert 0 < ready.span_tokens <= manifest_max


def test_with_asr_two_slots_share_one_recogniser(tiny_folder, data_dir):
    """One recogniser with a row per slot: two conversations talk at once, each heard on
    its own row of the one model, their frames in shared batched steps."""
    from app.asr.stt_catalog import ensure_stt_built, get_stt_manifest
    from app.checkpoints.catalog import get_manifest
    from app.checkpoints.loader import load_checkpoint
    from app.conversation.assembly import load_stt_model
    from app.conversation.config import ConversationConfig
    from app.engine.speech_engine import EngineOptions
    from app.server.engine_host import EngineHost

    ensure_stt_built(get_stt_manifest("tiny-stt"))
    config = ConversationConfig(stt_model="tiny-stt")
    checkpoint = load_checkpoint(get_manifest("tiny"), tiny_folder, device="cpu")
    stt = load_stt_model(config, checkpoint.device)
    host = EngineHost(checkpoint, EngineOptions(seed=1, chunk_limit=16), config, stt, slots=2)

    async def body(server, url):
        clients = [await EngineClient.connect(url, TOKEN) for _ in range(2)]
        talked = await asyncio.gather(*(converse(c, 0, 10) for c in clients))
        for client in clients:
            await client.close()
        return talked

    try:
        host.wait_warm()
        talked = run_server(host, body)
        recogniser = host.recogniser
        assert recogniser is not None and recogniser.row_count == 2
        assert 0 < recogniser.ticks < 20  # the two conversations' 20 frames shared steps
        assert recogniser.free_rows == 2  # both rows back
    finally:
        assert host.close()
    for events in talked:
        assert [a.index for a in of(AudioFrame, events)] == list(range(10))
        assert clean(events), of(wire.Error, events)


def test_a_burst_of_frames_waits_for_the_engine_and_nothing_counts_as_dropped(
        tiny_folder, data_dir):
    """A client far ahead of the engine (a burst of 4 s of frames, where the engine's queue
    holds 2 s) waits at its socket: every frame is answered, `/metrics` counts no frame
    dropped for the slot (it counted every retry of a full queue: 10,383 "drops" for 750
    frames, none lost), and the server's recogniser hears each frame once, so the times of
    its words stay within the audio sent (a retried frame was pushed to it again)."""
    import re

    from app.asr.stt_catalog import ensure_stt_built, get_stt_manifest
    from app.checkpoints.catalog import get_manifest
    from app.checkpoints.loader import load_checkpoint
    from app.conversation.assembly import load_stt_model
    from app.conversation.config import ConversationConfig
    from app.engine.speech_engine import EngineOptions
    from app.frames import FRAME_S
    from app.server.engine_host import EngineHost

    frames = 50
    ensure_stt_built(get_stt_manifest("tiny-stt"))
    config = ConversationConfig(stt_model="tiny-stt")
    checkpoint = load_checkpoint(get_manifest("tiny"), tiny_folder, device="cpu")
    stt = load_stt_model(config, checkpoint.device)
    host = EngineHost(checkpoint, EngineOptions(seed=1, chunk_limit=16), config, stt, slots=2)

    async def body(server, url):
        async with await EngineClient.connect(url, TOKEN) as client:
            for i in range(frames):  # all at once: the engine's queue fills
                await client.send_frame(tone(i))
            events = await collect(client, lambda ev: len(of(AudioFrame, ev)) == frames)
        async with aiohttp.ClientSession() as session, session.get(
                f"{url}/metrics", headers={"Authorization": f"Bearer {TOKEN}"}) as response:
            return events, await response.text()

    try:
        host.wait_warm()
        events, metrics = run_server(host, body)
    finally:
        assert host.close()
    assert [a.index for a in of(AudioFrame, events)] == list(range(frames)) and clean(events)
    dropped = re.findall(r'^contextspan_slot_dropped_frames_total\{slot="\d+"\} (\S+)$',
                         metrics, re.M)
    assert dropped and all(float(value) == 0 for value in dropped), dropped
    stepped = re.findall(r'^contextspan_slot_frames_total\{slot="\d+"\} (\S+)$', metrics, re.M)
    assert max(float(value) for value in stepped) >= frames
    heard = of(wire.UserText, events)
    assert heard  # the tiny recogniser babbles a word a frame
    assert max(u.t for u in heard) <= frames * FRAME_S + 1e-6, [u.t for u in heard][-5:]
