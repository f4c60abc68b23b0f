"""Fixtures for the tool tests: a guard that keeps every test on 127.0.0.1, and a small
local HTTP server that plays the web."""

from __future__ import annotations

import ipaddress
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import ddgs
import ollama
import pytest

from tests import ports

ARTICLE = """<!doctype html>
<html><head><title>Otters of the Baltic</title></head>
<body>
<nav><a href="/">Home</a> | <a href="/shop">Shop</a> | Subscribe to our newsletter today</nav>
<article>
<h1>Otters of the Baltic</h1>
<p>The Baltic otter population recovered strongly after 1990, when hunting stopped and the
rivers that feed the sea were cleaned of the worst industrial pollution.</p>
<p>Researchers counted more than four thousand otters along the Polish coast in the last
survey, twice the number found twenty years earlier, and young animals now settle in
harbours that were empty for a century.</p>
<p>Fishermen report otters raiding fish traps near Gdansk, and local councils are testing
otter-proof nets that keep the fish in and the otters out without harming either.</p>
</article>
<footer>Copyright 2026 Example Media Group. Cookie policy. Terms of use.</footer>
</body></html>
"""


def _is_loopback(host: object) -> bool:
    if not isinstance(host, str):
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return False


@pytest.fixture(autouse=True)
def no_outside_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any attempt to reach a host other than 127.0.0.1 fails loudly instead of leaving."""
    real_connect = socket.socket.connect
    real_connect_ex = socket.socket.connect_ex
    real_getaddrinfo = socket.getaddrinfo

    def check(sock: socket.socket, address: object) -> None:
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            host = address[0] if isinstance(address, tuple) else address
            if not _is_loopback(host):
                raise OSError(f"test tried to reach {host!r}: only 127.0.0.1 is allowed")

    def connect(sock: socket.socket, address: object) -> None:
        check(sock, address)
        return real_connect(sock, address)

    def connect_ex(sock: socket.socket, address: object) -> int:
        check(sock, address)
        return real_connect_ex(sock, address)

    def getaddrinfo(host: object, *args: object, **kwargs: object) -> list:
        if host is not None and not _is_loopback(host):
            raise socket.gaierror(f"test tried to resolve {host!r}: only 127.0.0.1 is allowed")
        return real_getaddrinfo(host, *args, **kwargs)

    def refuse(*args: object, **kwargs: object) -> None:
        # pytest.fail raises a BaseException, which the tools' own handlers cannot swallow.
        pytest.fail("a test called a real web search provider")

    # ddgs talks through primp (Rust sockets) that the socket guard cannot see: stub the
    # providers' entry points outright. Tests that need them patch in their own fakes.
    monkeypatch.setattr(ddgs, "DDGS", refuse)
    monkeypatch.setattr(ollama.Client, "web_search", refuse)
    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"  # one request per connection: nothing lingers

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _send(self, status: int, body: bytes, content_type: str,
              headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        routes = {
            "/article": lambda: self._send(200, ARTICLE.encode(), "text/html; charset=utf-8"),
            "/plain": lambda: self._send(200, b"Plain notes: the kettle is blue.",
                                         "text/plain; charset=utf-8"),
            "/image": lambda: self._send(200, b"\x89PNG\r\n\x1a\n" + bytes(64), "image/png"),
            "/redirect": lambda: self._send(302, b"", "text/plain", {"Location": "/article"}),
            "/loop": lambda: self._send(302, b"", "text/plain", {"Location": "/loop"}),
            "/to-file": lambda: self._send(302, b"", "text/plain",
                                           {"Location": "file:///etc/passwd"}),
            "/to-private-name": lambda: self._send(302, b"", "text/plain",
                                                   {"Location": "http://router.test/admin"}),
            "/host": lambda: self._send(200, f"host={self.headers.get('Host')}".encode(),
                                        "text/plain; charset=utf-8"),
            "/huge": self._huge,
        }
        route = routes.get(self.path)
        if route is None:
            self._send(404, b"<html><body>nothing here</body></html>", "text/html")
        else:
            route()

    def _huge(self) -> None:
        """200 MB of text, unannounced: the client must stop reading on its own."""
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.end_headers()
        line = b"all work and no play makes a very long page " * 1000 + b"\n"
        try:
            for _ in range(200_000_000 // len(line)):
                self.wfile.write(line)
        except OSError:  # the client hung up, as it should
            pass


@pytest.fixture()
def web_server() -> Iterator[str]:
    """Base URL of a local web server, stopped after the test."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.fixture()
def silent_port() -> Iterator[int]:
    """A port that accepts connections but never answers (for timeouts)."""
    with ports.silent_port() as port:
        yield port


@pytest.fixture()
def closed_port() -> int:
    """A port nothing listens on (connection refused at once)."""
    return ports.free_port()
