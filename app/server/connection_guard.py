"""Connections that are not yet requests: a deadline for their headers, and a cap.

aiohttp waits for a request's headers as long as the client cares to trickle them (a
slowloris holds a socket and a file descriptor each, forever), and accepts any number of
connections. The guard hooks the aiohttp server's public callbacks: a connection whose first
request's headers (a WebSocket handshake included) have not all arrived within the deadline
is closed, and one past the cap is answered 503 and closed at once (quietly: whoever can
connect must not be able to fill the log). An idle kept-alive connection is closed by
aiohttp's own keep-alive timeout, which the server sets to the same deadline.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from app.server.metrics import ServerMetrics

_OVER_CAP_BODY = b"too many connections: try again"
_REFUSAL_LINGER_S = 1.0  # how long a refused connection may take to read the 503
_OVER_CAP = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
             b"Connection: close\r\nRetry-After: 1\r\n"
             b"Content-Length: " + str(len(_OVER_CAP_BODY)).encode() + b"\r\n\r\n"
             + _OVER_CAP_BODY)


class ConnectionGuard:
    def __init__(self, max_connections: int, header_timeout_s: float,
                 metrics: ServerMetrics) -> None:
        self.max_connections = max_connections
        self.header_timeout_s = header_timeout_s
        self.metrics = metrics
        self._open: set[object] = set()
        self._waiting: dict[object, asyncio.TimerHandle] = {}  # handler -> its deadline

    @property
    def open_connections(self) -> int:
        return len(self._open)

    def install(self, server: web.Server) -> None:
        """Wrap `server`'s connection and request callbacks (instance attributes shadow the
        methods the request handlers call)."""
        made, lost, make_request = (server.connection_made, server.connection_lost,
                                    server.request_factory)

        def connection_made(handler: Any, transport: asyncio.Transport) -> None:
            made(handler, transport)
            self._opened(handler, transport)

        def connection_lost(handler: Any, exc: BaseException | None = None) -> None:
            self._closed(handler)
            lost(handler, exc)

        def request_factory(message: Any, payload: Any, protocol: Any, writer: Any,
                            task: Any, *rest: Any) -> web.BaseRequest:
            deadline = self._waiting.pop(protocol, None)  # its headers are all here
            if deadline is not None:
                deadline.cancel()
            return make_request(message, payload, protocol, writer, task, *rest)

        # The server's public callbacks, hooked on this one server object (module docstring).
        server.connection_made = connection_made  # type: ignore[method-assign]
        server.connection_lost = connection_lost  # type: ignore[method-assign]
        server.request_factory = request_factory

    def _opened(self, handler: RequestHandler, transport: asyncio.Transport) -> None:
        if len(self._open) >= self.max_connections:
            self.metrics.closed["too many connections"] += 1
            transport.write(_OVER_CAP)
            handler.close()  # what the client sends now is read and dropped, not served
            # The answer is followed by our end of the stream, and the socket itself closes
            # once the client has closed its end (or after a moment): closing it with the
            # client's request unread would send a reset that can overtake the 503. Not
            # closed here either way: aiohttp starts the connection's request task right
            # after this callback, and a connection already lost by then fails that task's
            # first line (`assert manager is not None`), a traceback per refused connection.
            if transport.can_write_eof():  # not over TLS, which has no half-close
                transport.write_eof()
            asyncio.get_running_loop().call_later(_REFUSAL_LINGER_S, transport.close)
            return
        self._open.add(handler)
        loop = asyncio.get_running_loop()
        self._waiting[handler] = loop.call_later(self.header_timeout_s, self._expire,
                                                 handler, transport.close)

    def _expire(self, handler: object, close: Callable[[], None]) -> None:
        if self._waiting.pop(handler, None) is not None:
            self.metrics.closed["headers too slow"] += 1
            close()

    def _closed(self, handler: object) -> None:
        self._open.discard(handler)
        deadline = self._waiting.pop(handler, None)
        if deadline is not None:
            deadline.cancel()
