"""A running conversation's link failure in words a person can act on (issue 35, item 11):
the OSError behind the client's failure is kept and worded, not the network library's
"Cannot connect to host … ssl:default [Connect call failed …]"."""

from __future__ import annotations

import asyncio
import socket

from app.remote.remote_engine import describe
from app.wire.client import EngineClient


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]  # nothing listens there once the probe closes


def _failure(url: str) -> BaseException:
    async def connect() -> BaseException:
        try:
            await EngineClient.connect(url, None, timeout=10)
        except Exception as exc:  # the client's ConnectError, with its cause
            return exc
        raise AssertionError("connected to nothing")

    return asyncio.run(connect())


def test_a_refused_port_is_said_with_what_to_do():
    url = f"http://127.0.0.1:{_closed_port()}"
    words = describe(_failure(url), url)
    assert words.startswith("Nothing answers at 127.0.0.1:")
    assert "python main.py serve" in words and "Connect call failed" not in words


def test_an_unknown_name_is_said_as_such():
    url = "http://no-such-host.invalid:8998"
    words = describe(_failure(url), url)
    assert "“no-such-host.invalid” is not known on this network" in words


def test_a_listener_that_closes_at_once_is_not_a_speech_server():
    """An https address on a plain server, or another program's port: it takes the
    connection and resets it."""
    async def main() -> str:
        async def reset(reader, writer):
            sock = writer.get_extra_info("socket")
            abort_on_close = b"\x01\x00\x00\x00\x00\x00\x00\x00"  # linger on, 0 s: a reset
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, abort_on_close)
            writer.close()

        server = await asyncio.start_server(reset, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        url = f"http://127.0.0.1:{port}"
        try:
            try:
                await EngineClient.connect(url, None, timeout=10)
            except Exception as exc:
                return describe(exc, url)
            raise AssertionError("a reset connection connected")
        finally:
            server.close()

    words = asyncio.run(main())
    assert words.startswith("127.0.0.1:") and "took the connection and closed it at once" in words
    assert "Connection reset by peer" not in words
