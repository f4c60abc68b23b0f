"""`serve --cluster`'s one public address: `serve`'s own guards in front of Ray Serve.

Ray Serve's HTTP proxy (uvicorn) waits for a request's headers as long as a client trickles
them and takes any number of connections, and offers no hook for either (its HTTPOptions set
a keep-alive and an end-to-end timeout only). So the cluster listens with `serve`'s listener
(web_app.listen: the header deadline and the connection cap of connection_guard.py), refuses
as `serve` does (web_app.authorize: this computer's rule of local_origin.py, the token of
auth.py), and relays what it lets in to Serve's proxy, which listens on the loopback only.
A WebSocket is relayed message by message, its close code and reason included (a replica's
`busy` and 1013 reach the client as they were sent); a handshake refused upstream is
answered as it was refused, its status, body and Retry-After included (`serve`'s busy
`/api/chat` is a 503 with a JSON `busy` body).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from contextvars import ContextVar
from dataclasses import dataclass

import aiohttp
from aiohttp import web

from app.server.config import ServerConfig
from app.server.connection_guard import ConnectionGuard
from app.server.metrics import ServerMetrics
from app.server.web_app import authorize, base_url, listen, refuse_foreign

_START_TIMEOUT_S = 30.0
_NORMAL_CLOSE = 1000
_RELAYED_HEADERS = ("Content-Type", "Retry-After", "WWW-Authenticate")
_REFUSAL_READ_TIMEOUT_S = 5.0


class FrontDoor:
    """Listens on `config`'s address and relays to `upstream` (Serve's proxy,
    `http://127.0.0.1:port`)."""

    # Serve queues requests while every replica is at its limit: a relayed answer or
    # handshake that has not come by then is a 504, not a connection held for ever.
    answer_timeout_s: float = 30.0

    def __init__(self, upstream: str, config: ServerConfig,
                 metrics: ServerMetrics | None = None) -> None:
        config.limits.check()
        self.upstream = upstream.rstrip("/")
        self.config = config
        self.metrics = metrics or ServerMetrics()
        self.port: int | None = None
        self.guard: ConnectionGuard | None = None  # made at start()
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self._sockets: set[web.WebSocketResponse] = set()

    def application(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/api/chat", self._relay_socket)
        app.router.add_get("/ws", self._relay_socket)
        app.router.add_get("/health", self._relay_health)
        app.router.add_get("/metrics", self._relay_metrics)
        app.on_shutdown.append(self._on_shutdown)  # type: ignore[arg-type]  # see web_app.py
        return app

    async def start(self) -> str:
        tracing = aiohttp.TraceConfig()
        tracing.on_request_end.append(_keep_refusal_body)  # type: ignore[arg-type]  # web_app.py
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(
            total=None, sock_connect=self.config.limits.header_timeout_s),
            trace_configs=[tracing])
        self._runner, self.guard, self.port = await listen(self.application(), self.config,
                                                           self.metrics)
        return self.url

    @property
    def url(self) -> str:
        return base_url(self.config, self.port)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._session is not None:
            await self._session.close()
            self._session = None

    # ---- relaying ---------------------------------------------------------------------------

    def _upstream_headers(self) -> dict[str, str]:
        """The door checked the client's token; the replicas check the same one again."""
        return {"Authorization": f"Bearer {self.config.token}"} if self.config.token else {}

    async def _relay_socket(self, request: web.Request) -> web.StreamResponse:
        authorize(request, self.config, self.metrics)
        assert self._session is not None
        limits = self.config.limits
        target = self.upstream.replace("http", "ws", 1) + request.path_qs
        refusal = _Refusal()
        _REFUSAL.set(refusal)  # filled by _keep_refusal_body if the handshake is refused
        try:
            upstream = await asyncio.wait_for(self._session.ws_connect(
                target, headers=self._upstream_headers(), autoclose=False, compress=0,
                max_msg_size=limits.hard_message_bytes), self.answer_timeout_s)
        except aiohttp.WSServerHandshakeError as exc:  # refused upstream: say the same
            headers = {name: exc.headers[name] for name in _RELAYED_HEADERS
                       if exc.headers is not None and name in exc.headers}
            return web.Response(status=exc.status, body=refusal.body, headers=headers)
        except asyncio.TimeoutError:
            return web.Response(status=504, text="the cluster did not take the conversation "
                                f"within {self.answer_timeout_s:g} s (every replica busy?)")
        except (aiohttp.ClientError, OSError) as exc:
            return web.Response(status=502, text=f"the cluster's proxy did not answer: {exc}")
        client = web.WebSocketResponse(max_msg_size=limits.hard_message_bytes,
                                       heartbeat=limits.heartbeat_s, compress=False,
                                       autoclose=False)
        try:
            await client.prepare(request)
        except BaseException:
            await upstream.close()
            raise
        self._sockets.add(client)
        try:
            await _relay(client, upstream)
        finally:
            self._sockets.discard(client)
        return client

    async def _relay_health(self, request: web.Request) -> web.StreamResponse:
        refuse_foreign(request, self.config, self.metrics)  # /health needs no token
        return await self._relay_get(request)

    async def _relay_metrics(self, request: web.Request) -> web.StreamResponse:
        authorize(request, self.config, self.metrics)
        return await self._relay_get(request)

    async def _relay_get(self, request: web.Request) -> web.StreamResponse:
        assert self._session is not None
        try:
            async with self._session.get(
                    self.upstream + request.path, headers=self._upstream_headers(),
                    timeout=aiohttp.ClientTimeout(total=self.answer_timeout_s)) as answer:
                body = await answer.read()
                headers = {name: answer.headers[name] for name in _RELAYED_HEADERS
                           if name in answer.headers}
                return web.Response(status=answer.status, body=body, headers=headers)
        except asyncio.TimeoutError:
            return web.Response(status=504, text="the cluster's proxy did not answer within "
                                f"{self.answer_timeout_s:g} s")
        except (aiohttp.ClientError, OSError) as exc:
            return web.Response(status=502, text=f"the cluster's proxy did not answer: {exc}")

    async def _on_shutdown(self, _app: web.Application) -> None:
        for client in list(self._sockets):
            await client.close(code=aiohttp.WSCloseCode.GOING_AWAY, message=b"server stopping")


@dataclass
class _Refusal:
    body: bytes = b""


# aiohttp's ws_connect raises on a refused handshake without the answer's body, and the body
# is what says why (a busy replica's `{"type": "busy", ...}`). The request's end is traced in
# the relaying task's context, where this holds the box the body goes into.
_REFUSAL: ContextVar[_Refusal | None] = ContextVar("front_door_refusal", default=None)
_MOST_REFUSAL_BYTES = 64 * 1024


async def _keep_refusal_body(_session: aiohttp.ClientSession, _context: object,
                             params: aiohttp.TraceRequestEndParams) -> None:
    """A handshake answered with anything but 101: read its (small) body for the client."""
    refusal, answer = _REFUSAL.get(), params.response
    if refusal is None or answer.status == 101:
        return
    if (answer.content_length or 0) > _MOST_REFUSAL_BYTES:
        return
    with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError):
        refusal.body = await asyncio.wait_for(answer.read(), _REFUSAL_READ_TIMEOUT_S)


async def _relay(client: web.WebSocketResponse,
                 upstream: aiohttp.ClientWebSocketResponse) -> None:
    """Both ways until one side closes; the other is closed with its code and reason."""
    to_upstream = asyncio.create_task(_pump(client, upstream))
    to_client = asyncio.create_task(_pump(upstream, client))
    done, pending = await asyncio.wait((to_upstream, to_client),
                                       return_when=asyncio.FIRST_COMPLETED)
    for task in pending:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
    first = done.pop()
    code, reason = first.result() if first.exception() is None else (_NORMAL_CLOSE, b"")
    other = upstream if first is to_upstream else client
    with contextlib.suppress(Exception):
        await other.close(code=code, message=reason)
    for side in (client, upstream):
        if not side.closed:
            with contextlib.suppress(Exception):
                await side.close()


async def _pump(source: web.WebSocketResponse | aiohttp.ClientWebSocketResponse,
                sink: web.WebSocketResponse | aiohttp.ClientWebSocketResponse
                ) -> tuple[int, bytes]:
    """Forward `source`'s messages to `sink`; returns the close code and reason it ended
    with."""
    while True:
        message = await source.receive()
        if message.type == aiohttp.WSMsgType.TEXT:
            await sink.send_str(message.data)
        elif message.type == aiohttp.WSMsgType.BINARY:
            await sink.send_bytes(message.data)
        elif message.type == aiohttp.WSMsgType.CLOSE:
            with contextlib.suppress(Exception):
                await source.close(code=message.data, message=(message.extra or "").encode())
            return int(message.data), (message.extra or "").encode()
        else:  # CLOSING, CLOSED, ERROR: gone without a close frame of its own
            return source.close_code or _NORMAL_CLOSE, b""


class FrontDoorThread:
    """A front door on a thread of its own, with its own event loop, for `deploy`, which
    blocks in Ray's calls and then in a sleep."""

    def __init__(self, door: FrontDoor) -> None:
        self.door = door
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="front-door",
                                        daemon=True)

    def start(self) -> str:
        """Listening when it returns; raises what the start raised (a port in use, TLS)."""
        self._thread.start()
        future = asyncio.run_coroutine_threadsafe(self.door.start(), self._loop)
        try:
            return future.result(_START_TIMEOUT_S)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        if self._loop.is_closed():
            return
        if self._thread.is_alive():
            future = asyncio.run_coroutine_threadsafe(self.door.stop(), self._loop)
            with contextlib.suppress(Exception):
                future.result(_START_TIMEOUT_S)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(_START_TIMEOUT_S)
        self._loop.close()
