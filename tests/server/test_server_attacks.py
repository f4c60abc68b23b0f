"""Attacks from the loopback that once got through (issue 19, part C): each is refused the
way a wrong request is, and the conversation goes on."""

from __future__ import annotations

import asyncio
import gc
import json
import logging

import aiohttp
import sphn

from app.server.auth import token_matches
from app.wire import events as wire
from app.wire.client import AudioFrame, Disconnected, EngineClient
from tests.server.helpers import TOKEN, collect, health, of, run_server, tone, wait_until_free

NESTED = "[" * 3000 + "]" * 3000  # 6 KB: a RecursionError in json.loads


async def _raw_request(url: str, request: bytes) -> bytes:
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(request)
        await writer.drain()
        return await asyncio.wait_for(reader.read(4096), 30)
    finally:
        writer.close()


def test_a_token_that_is_not_utf8_is_a_wrong_token():
    # aiohttp reads header bytes that are not UTF-8 as lone surrogates.
    assert token_matches("\udcff\udcfe", TOKEN) is False
    assert token_matches(TOKEN + "\udcff", TOKEN) is False
    assert token_matches(TOKEN, TOKEN) is True


def test_non_utf8_bytes_in_the_authorization_header_get_401_not_500(tiny_host):
    async def body(server, url):
        answers = []
        for path in (b"/ws", b"/api/chat"):
            answers.append(await _raw_request(url, (
                b"GET " + path + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                b"Authorization: Bearer \xff\xfe\xc3(\r\nConnection: close\r\n\r\n")))
        return answers, await health(url), server.metrics.unauthorized

    answers, status, unauthorized = run_server(tiny_host, body)
    for answer in answers:
        assert answer.split(b"\r\n", 1)[0].endswith(b"401 Unauthorized"), answer[:200]
    assert unauthorized == 2 and status["status"] == "ready"


def test_deeply_nested_json_is_an_error_event_not_an_engine_failure_on_ws(tiny_host):
    async def body(server, url):
        async with await EngineClient.connect(url, TOKEN) as client:
            await client._ws.send_str(NESTED)
            await client.send_frame(tone(0))
            await client.send_frame(tone(1))
            return await collect(client, lambda ev: len(of(AudioFrame, ev)) == 2)

    events = run_server(tiny_host, body)
    errors = of(wire.Error, events)
    assert [(e.stage, e.frame) for e in errors] == [("message", None)]
    assert "nested" in errors[0].message
    assert [a.index for a in of(AudioFrame, events)] == [0, 1]
    assert not of(Disconnected, events)


def test_deeply_nested_json_is_an_error_event_on_the_moshi_endpoint(tiny_host):
    async def body(server, url):
        writer, reader = sphn.OpusStreamWriter(24000), sphn.OpusStreamReader(24000)
        events, samples = [], 0
        chat = url.replace("http://", "ws://") + f"/api/chat?token={TOKEN}&events=json"
        async with aiohttp.ClientSession() as session, session.ws_connect(chat) as ws:
            await ws.receive(timeout=60)  # the handshake
            await ws.send_bytes(b"\x10" + NESTED.encode())
            for i in range(3):
                await ws.send_bytes(b"\x01" + writer.append_pcm(tone(i)))
            while samples < 3 * 1920:
                message = await ws.receive(timeout=60)
                assert message.type == aiohttp.WSMsgType.BINARY, message
                kind, payload = message.data[0], message.data[1:]
                if kind == 1:
                    samples += len(reader.append_bytes(payload))
                elif kind == 0x10:
                    events.append(json.loads(payload))
        return events, samples

    events, samples = run_server(tiny_host, body)
    assert samples == 3 * 1920  # the conversation went on
    errors = [e for e in events if e["type"] == "error"]
    assert errors and errors[0]["stage"] == "message" and "nested" in errors[0]["message"]
    assert not any(e["type"] == "error" and e["stage"] == "engine" for e in events)


def test_decode_request_refuses_deep_nesting_with_a_wire_error():
    for text in (NESTED, '{"type": "span", "text": ' + NESTED + "}"):
        try:
            wire.decode_request(text)
        except wire.WireError as exc:
            assert exc.stage == "message" and "nested" in str(exc)
        else:
            raise AssertionError("nested JSON was accepted")


# ---- item 15: Ogg pages whose one packet never ends ---------------------------------------

def _ogg_crc(data: bytes) -> int:
    """Ogg's page checksum (CRC-32, polynomial 0x04c11db7, not reflected, initial 0)."""
    crc = 0
    for byte in data:
        crc ^= byte << 24
        for _ in range(8):
            crc = ((crc << 1) ^ 0x04C11DB7) if crc & 0x80000000 else crc << 1
            crc &= 0xFFFFFFFF
    return crc


def _endless_packet_page(serial: int, sequence: int, continued: bool) -> bytes:
    """A valid Ogg page of 255 segments of 255 bytes: its packet goes on to the next page."""
    import struct

    segments = 255
    header = (b"OggS" + bytes([0, 1 if continued else 0])
              + struct.pack("<qIIIB", -1, serial, sequence, 0, segments) + bytes([255] * segments))
    page = header + bytes(255 * segments)
    return page[:22] + struct.pack("<I", _ogg_crc(page)) + page[26:]


def _opus_start() -> tuple[bytes, int]:
    import struct

    first = sphn.OpusStreamWriter(24000).append_pcm(tone(0))
    return first, struct.unpack("<I", first[14:18])[0]  # the stream's serial number


def test_the_opus_decoder_holds_a_bounded_amount_of_an_endless_packet():
    from app.server.codec import Frame, Goodbye
    from app.server.moshi_codec import MAX_UNDECODED_BYTES, MoshiCodec
    from app.server.wire_socket import Incoming

    codec = MoshiCodec()
    first, serial = _opus_start()
    out = codec.decode(Incoming("binary", b"\x01" + first))
    assert [type(item) for item in out] == [Frame]
    page = _endless_packet_page(serial, 10, continued=False)
    sent, goodbye = 0, None
    for sequence in range(10, 10 + 40):  # 2.6 MB in all, under the 64 KiB message limit each
        page = _endless_packet_page(serial, sequence, continued=sequence > 10)
        assert len(page) < 64 * 1024
        sent += len(page)
        found = [i for i in codec.decode(Incoming("binary", b"\x01" + page))
                 if isinstance(i, Goodbye)]
        if found:
            goodbye = found[0]
            break
    assert goodbye is not None, f"{sent} bytes of an endless packet were all kept"
    assert sent <= MAX_UNDECODED_BYTES + len(page)
    assert goodbye.code == 1009 and "never ends" in str(goodbye.error)


def test_an_endless_opus_packet_is_told_and_the_connection_closed(tiny_host):
    async def body(server, url):
        first, serial = _opus_start()
        events, closed = [], None
        chat = url.replace("http://", "ws://") + f"/api/chat?token={TOKEN}&events=json"
        async with aiohttp.ClientSession() as session, session.ws_connect(chat) as ws:
            await ws.receive(timeout=60)  # the handshake
            await ws.send_bytes(b"\x01" + first)
            for sequence in range(10, 10 + 40):
                try:
                    await ws.send_bytes(b"\x01" + _endless_packet_page(
                        serial, sequence, continued=sequence > 10))
                except ConnectionError:
                    break
            while True:
                message = await ws.receive(timeout=60)
                if message.type != aiohttp.WSMsgType.BINARY:
                    closed = ws.close_code
                    break
                if message.data[0] == 0x10:
                    events.append(json.loads(message.data[1:]))
        await wait_until_free(url)
        return events, closed, server.metrics.closed, await health(url)

    events, code, reasons, status = run_server(tiny_host, body)
    errors = [e for e in events if e["type"] == "error"]
    assert any("never ends" in e["message"] for e in errors), errors
    assert code == 1009 and reasons["undecodable audio"] == 1
    assert status["status"] == "ready" and not status["busy"]


# ---- item 16: a tokenless loopback server answers this computer only ----------------------

def test_without_a_token_web_pages_and_rebound_names_are_refused(tiny_host):
    async def body(server, url):
        port = url.rsplit(":", 1)[1]
        results = {}
        async with aiohttp.ClientSession() as session:
            for label, headers in (
                    ("evil origin", {"Origin": "https://evil.example"}),
                    ("null origin", {"Origin": "null"}),
                    ("rebound host", {"Host": f"attacker.example:{port}"}),
                    ("loopback origin", {"Origin": f"http://localhost:{port}"}),
                    ("no origin", {})):
                for path in ("/ws", "/api/chat", "/metrics", "/health"):
                    scheme = "http" if path in ("/metrics", "/health") else "ws"
                    target = url.replace("http", scheme) + path
                    try:
                        if scheme == "ws":
                            async with session.ws_connect(target, headers=headers) as ws:
                                results[label, path] = 101
                                await ws.close()
                        else:
                            async with session.get(target, headers=headers) as response:
                                results[label, path] = response.status
                    except aiohttp.WSServerHandshakeError as exc:
                        results[label, path] = exc.status
                    await wait_until_free(url)
        return results

    results = run_server(tiny_host, body, token=None)
    for label in ("evil origin", "null origin", "rebound host"):
        for path in ("/ws", "/api/chat", "/metrics", "/health"):
            assert results[label, path] == 403, (label, path, results[label, path])
    for label in ("loopback origin", "no origin"):
        assert results[label, "/ws"] == results[label, "/api/chat"] == 101, results
        assert results[label, "/metrics"] == results[label, "/health"] == 200


def test_with_a_token_the_token_decides_whatever_the_origin(tiny_host):
    async def body(server, url):
        async with aiohttp.ClientSession() as session:
            target = f"{url}/metrics?token={TOKEN}"
            async with session.get(target, headers={"Origin": "https://evil.example"}) as ok, \
                    session.get(f"{url}/metrics",
                                headers={"Origin": "http://127.0.0.1"}) as refused:
                return ok.status, refused.status

    assert run_server(tiny_host, body) == (200, 401)


def test_loopback_names():
    from app.server.local_origin import foreign_request, is_loopback_name

    assert all(map(is_loopback_name, ("127.0.0.1", "127.3.2.1", "::1", "[::1]", "localhost",
                                      "LOCALHOST.", "app.localhost")))
    assert not any(map(is_loopback_name, ("evil.example", "10.0.0.1", "0.0.0.0",
                                          "127.0.0.1.evil.example", "")))
    assert foreign_request({"Host": "[::1]:8998"}) is None
    assert foreign_request({"Host": "127.0.0.1:8998", "Origin": "http://[::1]:3000"}) is None
    assert "Host" in foreign_request({"Host": "127.0.0.1.nip.io:8998"})


# ---- item 17: half-open requests and the connection cap -----------------------------------

async def _half_open(url: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection that starts a request and never finishes its headers."""
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Trickle: a")
    await writer.drain()
    return reader, writer


async def _closed_by_server(reader: asyncio.StreamReader, within_s: float) -> bool:
    try:
        await asyncio.wait_for(reader.read(), within_s)  # b"" or an answer, then EOF
        return True
    except (asyncio.TimeoutError, ConnectionError):
        return False


def test_half_open_requests_are_closed_after_the_header_deadline(tiny_host):
    async def body(server, url):
        sockets = [await _half_open(url) for _ in range(40)]
        closed = await asyncio.gather(*(_closed_by_server(r, 30.0) for r, _ in sockets))
        for _, writer in sockets:
            writer.close()
        return closed, server.metrics.closed["headers too slow"], await health(url)

    closed, counted, status = run_server(tiny_host, body, header_timeout_s=0.5)
    assert all(closed) and counted == 40
    assert status["status"] == "ready"  # a whole request still gets its answer


def test_past_the_cap_a_connection_gets_503_and_the_others_go_on(tiny_host):
    async def body(server, url):
        held = [await _half_open(url) for _ in range(4)]
        extra_reader, extra_writer = await _half_open(url)
        answer = await asyncio.wait_for(extra_reader.read(), 30.0)
        extra_writer.close()
        for _, writer in held:
            writer.close()
        await asyncio.sleep(0)  # let the server see them go
        for _ in range(200):
            if server.guard.open_connections == 0:
                break
            await asyncio.sleep(0.05)
        return answer, server.metrics.closed["too many connections"], await health(url)

    answer, refused, status = run_server(tiny_host, body, max_connections=4,
                                         header_timeout_s=60.0)
    assert answer.startswith(b"HTTP/1.1 503") and refused == 1
    assert status["status"] == "ready"


def test_past_the_cap_an_http_client_reads_the_whole_503_and_nothing_is_logged(tiny_host,
                                                                              caplog):
    """The refusal is a well-formed answer (aiohttp, curl and browsers read its body whole,
    its Content-Length right), and refusing costs no traceback: a client that can connect must
    not be able to fill the server's log."""
    problems: list[dict] = []

    async def body(server, url):
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _loop, context: problems.append(context))
        held = [await _half_open(url) for _ in range(2)]
        answers = []
        async with aiohttp.ClientSession() as session:
            for _ in range(5):
                async with session.get(f"{url}/health") as answer:
                    answers.append((answer.status, answer.headers.get("Retry-After"),
                                    await answer.text()))
        for _, writer in held:
            writer.close()
        for _ in range(200):  # the refused connections' tasks end, and would complain now
            if server.guard.open_connections == 0:
                break
            await asyncio.sleep(0.05)
        gc.collect()  # a task that failed and nobody awaited is reported when collected
        await asyncio.sleep(0.1)
        return answers

    with caplog.at_level(logging.WARNING):
        answers = run_server(tiny_host, body, max_connections=2, header_timeout_s=60.0)
    assert answers == [(503, "1", "too many connections: try again")] * 5
    assert problems == []
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text


# ---- item 18: a burst of resets costs one new engine --------------------------------------

def test_a_burst_of_resets_builds_one_new_conversation_not_forty(tiny_host):
    async def body(server, url):
        async with await EngineClient.connect(url, TOKEN) as client:
            await client.send_frame(tone(0))
            await collect(client, lambda ev: of(AudioFrame, ev))
            for _ in range(40):
                await client.reset()
            await client.send_frame(tone(1))
            events = await collect(client, lambda ev: of(AudioFrame, ev))
            return events, await health(url)

    events, status = run_server(tiny_host, body)
    readies = of(wire.Ready, events)
    # The first reset may be read alone (the others still on their way): at most two builds.
    assert 1 <= len(readies) <= 2 and status["sessions_total"] <= 3, (readies, status)
    assert readies[-1].frames_received == 1  # the frame after the burst went to the last one
    assert of(AudioFrame, events)[0].index == 1 and not of(wire.Error, events)


# ---- item 18: TLS files are checked before the model loads --------------------------------

def test_tls_files_are_checked_before_the_model_loads(monkeypatch, capsys, tmp_path):
    from pathlib import Path

    from app.server import engine_host
    from app.server.cli import main

    loads = []
    monkeypatch.setattr(engine_host.EngineHost, "load", classmethod(
        lambda cls, *args, **kwargs: loads.append(args) or (_ for _ in ()).throw(
            AssertionError("the model was loaded"))))
    tls = Path(__file__).resolve().parents[1] / "tools" / "tls"
    cert, key = tls / "intranet_test_cert.pem", tls / "intranet_test_key.pem"
    for cert_path, key_path, said in ((tmp_path / "none.pem", key, "No such file"),
                                      (cert, cert, "TLS"),
                                      (cert, None, "both")):
        argv = ["--model", "tiny", "--ssl-cert", str(cert_path)]
        if key_path is not None:
            argv += ["--ssl-key", str(key_path)]
        assert main(argv) == 1
        error = capsys.readouterr().err
        assert said in error and error.startswith("error: "), error
    assert loads == []
