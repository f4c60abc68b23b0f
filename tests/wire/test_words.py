"""The model's and the recognition's words, each sent once and a few frames' in one message
(`words`, app/wire/words.py): the client rebuilds the very `text` and `user_text` events the
server's conversation said, in order, so the transcript is the same, for a fraction of the
bytes (the whole utterance with every word was 62 % of what went down); a client that never
asks (the reference's page) still gets each event as it was, and an older server that does
not know the request still serves ours."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest
from aiohttp import web

from app.server.reference_codec import ReferenceCodec
from app.server.wire_socket import Incoming
from app.wire import events as wire
from app.wire.client import AudioFrame, EngineClient
from app.wire.words import WordsReader, WordsWriter
from tests.server.helpers import TOKEN, collect, of, run_server, tone

ASK = wire.encode_request(wire.WordsRequest())
AUDIO = None  # a frame of audio, in a script of what a server says


def _said() -> list:
    """A conversation's words as a server says them, between frames of audio: the model's
    text, partials growing a word at a time, one revising its last word, two utterances
    overlapping, finals, other events, and a new conversation whose first utterance starts at
    the frame an old one did."""
    words = ["what", "is", "the", "capital", "of", "australia"]
    out: list = []
    for i in range(6):
        out += [wire.Text(f" m{i}"), wire.UserText(12, False, 1.0 + 0.1 * i,
                                                   " ".join(words[:i + 1])), AUDIO]
    out += [wire.UserText(12, False, 1.7, "what is the capital of austria"),  # revised
            wire.UserText(40, False, 3.3, "and"), AUDIO, wire.Ret(30),
            wire.UserText(12, True, 1.8, "what is the capital of australia?"),
            wire.UserText(40, False, 3.4, "and café ☕ too"), wire.Text(" ok"), AUDIO,
            wire.UserText(40, True, 3.5, "and café ☕ too"), AUDIO, AUDIO]
    out += [wire.Ready(conversation=2), wire.Text(" hi"), wire.UserText(12, False, 0.9, "hello"),
            AUDIO, wire.UserText(12, True, 1.0, "hello there"), AUDIO]
    return out


def _through_the_codec(said: list) -> tuple[list, list[str | bytes]]:
    """`said` through a codec asked for words: what a reader rebuilds of what it wrote
    (events, AUDIO for each frame, each text with the audio frames before it), and what it
    wrote."""
    codec, reader = ReferenceCodec(), WordsReader()
    assert codec.decode(Incoming("text", ASK)) == []  # the codec's own: nothing to apply
    written: list[str | bytes] = []
    for event in said:
        if event is AUDIO:
            written += codec.audio(tone(0))
        elif isinstance(event, wire.Ready):
            written += codec.ready(event)
        else:
            written += codec.event(event)
    rebuilt: list = []
    for message in written:
        if isinstance(message, bytes):
            rebuilt.append(AUDIO)
            continue
        decoded = wire.decode_event(message)
        if isinstance(decoded, wire.Ready):
            reader.new_conversation()
        rebuilt += reader.events(decoded) if isinstance(decoded, wire.Words) else [decoded]
    return rebuilt, written


def _as_arrived(said: list) -> list:
    """`said` as a client that never asked reads it: each text given the audio frames of
    its conversation before it, as the rebuilt ones carry them."""
    out, audio = [], 0
    for event in said:
        if isinstance(event, wire.Ready):
            audio = 0
        elif event is AUDIO:
            audio += 1
        elif isinstance(event, wire.Text):
            event = wire.Text(event.delta, audio)
        out.append(event)
    return out


def test_the_reader_rebuilds_every_event_in_its_order_and_frame() -> None:
    rebuilt, written = _through_the_codec(_said())
    words = [e for e in _as_arrived(_said()) if isinstance(e, (wire.Text, wire.UserText))]
    assert [e for e in rebuilt if isinstance(e, (wire.Text, wire.UserText))] == words
    others = [e for e in _said() if not isinstance(e, (wire.Text, wire.UserText))]
    assert [e for e in rebuilt if not isinstance(e, (wire.Text, wire.UserText))] == others
    # Every event keeps its place among the other events (audio may come between).
    order = [e for e in rebuilt if e is not AUDIO]
    assert order == [e for e in _as_arrived(_said()) if e is not AUDIO]
    assert all(": " not in m for m in written if isinstance(m, str) and "☕" not in m)


def test_held_words_go_out_before_any_other_event_and_within_four_frames() -> None:
    partials = [wire.UserText(7, False, 0.1 * i, "a" * i) for i in range(1, 4)]
    span = wire.Span("a fact", source="notes")
    rebuilt, written = _through_the_codec([*partials, span])
    assert rebuilt == [*partials, span]
    assert [json.loads(m)["type"] for m in written] == ["words", "span"]  # one message
    rebuilt, written = _through_the_codec([partials[0], AUDIO, AUDIO, AUDIO])
    assert rebuilt == [AUDIO] * 3  # held for a moment...
    rebuilt, written = _through_the_codec([partials[0], AUDIO, AUDIO, AUDIO, AUDIO])
    assert rebuilt == [AUDIO] * 3 + [partials[0], AUDIO]  # ...and sent before the 4th frame
    final = wire.UserText(7, True, 0.5, "aaa!")
    rebuilt, written = _through_the_codec([*partials, final])
    assert rebuilt == [*partials, final] and len(written) == 1  # a final: at once


def test_a_long_utterance_costs_its_words_once() -> None:
    """One utterance of 40 words, a partial a word and a frame: the whole-utterance form
    sends ~20 times its text, the words form once (and a message's fields for four)."""
    writer = WordsWriter()
    words = [f"word{i}" for i in range(40)]
    partials = [wire.UserText(3, i == 39, round(0.08 * i, 2), " ".join(words[:i + 1]))
                for i in range(40)]
    whole = sum(len(wire.encode_event(p)) for p in partials)
    once = sum(len(wire.encode_event(m, compact=True)) for p in partials
               for m in [*writer.user_text(p), *writer.frame()])
    assert once * 6 < whole, (once, whole)


def test_a_client_that_never_asks_gets_each_event_as_it_was() -> None:
    codec = ReferenceCodec()
    for event in (wire.UserText(5, False, 0.5, "hi"), wire.Text(" a")):
        assert codec.event(event) == [wire.encode_event(event)]
    assert ": " in codec.event(wire.Text(" a"))[0]  # the reference's JSON, as it always was


def test_a_reader_stops_at_what_a_server_would_not_send() -> None:
    reader = WordsReader()
    assert reader.events(wire.Words([["x", 0, "hi", 0.1]])) == []
    assert reader.events(wire.Words([[1, -1, "hi", 0.1]])) == []
    assert reader.events(wire.Words([[1, 0, "hi", 0.1], [" a", True], [" b", 3]])) == [
        wire.UserText(1, False, 0.1, "hi")]
    assert reader.events(wire.Words([[2, 5, "hi", 0.2, 1]])) == [
        wire.UserText(2, True, 0.2, "hi")]  # keeps what it has: nothing
    assert reader.events(wire.Words("junk")) == []  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def asr_host(tiny_folder):
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
    host = EngineHost(checkpoint, EngineOptions(seed=1, chunk_limit=16), config,
                      load_stt_model(config, checkpoint.device))
    host.wait_warm()
    yield host
    assert host.close()


FRAMES = 100


async def _talk(url: str, words: bool) -> tuple[list, dict, dict]:
    async with await EngineClient.connect(url, TOKEN, words=words) as client:
        await client.send_span("a fact", "notes")
        for i in range(FRAMES):
            await client.send_frame(tone(i))
        events = await collect(client, lambda ev: len(of(AudioFrame, ev)) == FRAMES)
        return (events, dict(client.stream_bytes["received"]),
                dict(client.stream_bytes["sent"]))


def test_over_a_server_the_words_come_once_and_read_back_the_same(asr_host, monkeypatch
                                                                  ) -> None:
    """Through `serve` with its recognition, the client asking for `words` (its default):
    it gives the very `text` and `user_text` events the server's conversation said (as the
    codec was handed them), each text at the frame its arrival gave it before, and its text
    stream is a fraction of what a client that does not ask is sent, event for event."""
    said: list = []
    encode, audio = ReferenceCodec.event, ReferenceCodec.audio

    def noting(codec: ReferenceCodec, event: wire.ServerEvent) -> list[bytes | str]:
        if isinstance(event, (wire.UserText, wire.Text)):
            said.append(event)
        return encode(codec, event)

    def counting(codec: ReferenceCodec, pcm) -> list[bytes | str]:
        said.append(AUDIO)
        return audio(codec, pcm)

    monkeypatch.setattr(ReferenceCodec, "audio", counting)

    monkeypatch.setattr(ReferenceCodec, "event", noting)

    async def body(server, url):
        once = await _talk(url, words=True)
        while asr_host.busy:
            await asyncio.sleep(0.02)
        heard = list(said)
        whole = await _talk(url, words=False)
        return heard, once, whole

    heard, (events_once, down_once, up_once), (events_whole, down_whole, _) = run_server(
        asr_host, body)
    print(f"\nbytes down per stream, words: {down_once}; event by event: {down_whole}")
    words_once = [e for e in events_once if isinstance(e, (wire.Text, wire.UserText))]
    said_words = [e for e in _as_arrived(heard) if e is not AUDIO]
    assert of(wire.UserText, said_words), "the tiny recogniser says a word a frame"
    assert words_once == said_words[:len(words_once)]
    assert len(words_once) >= len(said_words) - 8  # all but what came after the last audio
    words_whole = [e for e in events_whole if isinstance(e, (wire.Text, wire.UserText))]
    per_event_once = down_once["text"] / len(words_once)
    per_event_whole = down_whole["text"] / len(words_whole)
    assert per_event_once * 2 < per_event_whole, (down_once, down_whole)
    assert down_once["audio"] == down_whole["audio"] > 0
    assert down_once["control"] > 0 and up_once["text"] > 0  # the span's events, the span


def test_an_older_server_refuses_the_request_and_its_user_text_is_read() -> None:
    """A server that knows no `words` answers the request with an error, as ours did
    before it: the client says nothing of it and reads `user_text` as it comes."""
    said = wire.UserText(3, True, 0.4, "hello")

    async def older(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        await ws.send_str(wire.encode_event(wire.Ready()))
        async for message in ws:
            if message.type == aiohttp.WSMsgType.TEXT:
                kind = json.loads(message.data).get("type")
                await ws.send_str(wire.encode_event(wire.Error(
                    "message", f"unknown message type {kind!r}")))
                await ws.send_str(wire.encode_event(said))
        return ws

    async def main():
        app = web.Application()
        app.router.add_get("/ws", older)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        try:
            url = f"http://127.0.0.1:{runner.addresses[0][1]}"
            async with await EngineClient.connect(url) as client:
                events = await collect(client, lambda ev: bool(of(wire.UserText, ev)),
                                       timeout=30)
                return events, client.words_refused
        finally:
            await runner.cleanup()

    events, refused = asyncio.run(main())
    assert of(wire.UserText, events) == [said]
    assert not of(wire.Error, events) and refused and "words" in refused
