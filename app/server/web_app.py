"""The aiohttp server of `python main.py serve`: one engine, one conversation at a time.

Routes:
- `GET /api/chat`: moshi's protocol (moshi_codec.py). Busy: HTTP 503 before the upgrade.
- `GET /ws`: the reference's protocol (reference_codec.py). Busy: a `busy` event, then the
  socket closes with 1013 (try again later), as the reference answers.
- `GET /health`: JSON status, open to all (load balancers).
- `GET /metrics`: Prometheus text.
Every route but /health needs the token when one is set (401 otherwise). Without a token, a
server on the loopback answers only requests from this computer: a loopback Host, and no
Origin or a loopback one (403 otherwise), so no web page the user opens can use it
(local_origin.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
import ssl
from collections.abc import Callable
from typing import Any

from aiohttp import WSCloseCode, web

from app.frames import FRAME_SAMPLES, SAMPLE_RATE
from app.server.auth import presented_token, token_matches
from app.server.codec import Codec
from app.server.config import ServerConfig
from app.server.connection import Connection
from app.server.connection_guard import ConnectionGuard
from app.server.engine_host import EngineHost, Lease
from app.server.local_origin import refusal
from app.server.metrics import ServerMetrics
from app.server.moshi_codec import EVENTS_QUERY, MoshiCodec
from app.server.reference_codec import ReferenceCodec
from app.server.slot_metrics import render_host_slots
from app.server.wire_socket import AiohttpSocket
from app.wire import events as wire

log = logging.getLogger(__name__)

RETRY_AFTER_S = 5
RESTART_RETRY_AFTER_S = 15  # a new engine warms up
BUSY_MESSAGE = "the engine holds another conversation: try again when it ends"


def ssl_context(config: ServerConfig) -> ssl.SSLContext | None:
    if config.ssl_cert is None and config.ssl_key is None:
        return None
    if config.ssl_cert is None or config.ssl_key is None:
        raise ValueError("TLS needs both --ssl-cert and --ssl-key")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(certfile=str(config.ssl_cert), keyfile=str(config.ssl_key))
    return context


def base_url(config: ServerConfig, port: int | None) -> str:
    """The URL clients use for a listener on `port` (an IPv6 host in brackets)."""
    host = config.host if ":" not in config.host else f"[{config.host}]"
    return f"{config.scheme}://{host}:{port}"


async def listen(app: web.Application, config: ServerConfig,
                 metrics: ServerMetrics) -> tuple[web.AppRunner, ConnectionGuard, int]:
    """Serve `app` on the config's address behind the connection guard (a deadline for
    request headers, a cap on connections): `serve`'s listener, and the cluster's front
    door's. Returns the runner, the guard and the port bound (port 0: any free one)."""
    limits = config.limits
    # An idle kept-alive connection is closed as soon as a slow request would be.
    runner = web.AppRunner(app, handle_signals=False, keepalive_timeout=limits.header_timeout_s)
    await runner.setup()
    assert runner.server is not None
    guard = ConnectionGuard(limits.max_connections, limits.header_timeout_s, metrics)
    guard.install(runner.server)
    site = web.TCPSite(runner, config.host, config.port, ssl_context=ssl_context(config))
    await site.start()
    addresses = runner.addresses  # (host, port, ...) of each bound socket
    assert addresses
    return runner, guard, addresses[0][1]


def refuse_foreign(request: web.Request, config: ServerConfig, metrics: ServerMetrics) -> None:
    """Without a token, a loopback server answers this computer only (local_origin.py)."""
    why = refusal(request.headers, config.token, config.host)
    if why is not None:
        metrics.unauthorized += 1
        raise web.HTTPForbidden(text=why)


def authorize(request: web.Request, config: ServerConfig, metrics: ServerMetrics) -> None:
    """This computer's rule, then the token: 403 or 401, as every route but /health has."""
    refuse_foreign(request, config, metrics)
    if not token_matches(presented_token(request.headers, request.query), config.token):
        metrics.unauthorized += 1
        raise web.HTTPUnauthorized(text="a token is needed: ?token= or Authorization: Bearer",
                                   headers={"WWW-Authenticate": "Bearer"})


def health(host: EngineHost, metrics: ServerMetrics) -> dict[str, Any]:
    """The server's state as it is: `status` ready, starting, restarting (after an engine
    failure, with the reason in `message`), failed (it exits) or error (a conversation
    would not stop); `free_slots` is 0 whenever no conversation can start."""
    import torch  # loaded with the model already

    body = {"status": host.state, "model": host.model_id,
            "device": host.device, "busy": host.busy, "sample_rate": SAMPLE_RATE,
            "frame_size": FRAME_SAMPLES, "sessions_total": sum(metrics.sessions.values()),
            "frames_total": metrics.frames, "late_frames_total": metrics.late_frames,
            "slots": host.slots, "free_slots": host.free_slots,
            "engine_failures_total": host.failures, "engine_restarts_total": host.restarts,
            "torch_threads": torch.get_num_threads()}
    message = host.unavailable or host.stuck
    if message:
        body["message"] = message
    return body


def unavailable_answer(host: EngineHost) -> tuple[str, int]:
    """What a client who knocks when no slot can be taken is told, and when to retry."""
    reason = host.unavailable
    if reason is None:
        return BUSY_MESSAGE, RETRY_AFTER_S
    return f"{reason}: try again shortly", RESTART_RETRY_AFTER_S


class EngineServer:
    def __init__(self, host: EngineHost, config: ServerConfig,
                 metrics: ServerMetrics | None = None) -> None:
        config.limits.check()
        self.host = host
        self.config = config
        self.metrics = metrics or ServerMetrics()
        self._connections: set[Connection] = set()
        self._runner: web.AppRunner | None = None
        self.guard: ConnectionGuard | None = None  # made at start()
        self.port: int | None = None

    def application(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/api/chat", self._moshi_chat)
        app.router.add_get("/ws", self._reference_ws)
        app.router.add_get("/health", self._health)
        app.router.add_get("/metrics", self._metrics)
        # aiohttp 3.11 declares its signals in aiosignal's pre-1.4 form, which aiosignal 1.4
        # reads as a signal of callbacks: a correct handler reads as the wrong type.
        app.on_shutdown.append(self._on_shutdown)  # type: ignore[arg-type]
        return app

    # ---- running ------------------------------------------------------------------------

    async def start(self) -> str:
        """Listen (port 0: any free port); returns the base URL."""
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

    async def serve_until_signalled(self, on_ready: Callable[[str], None]) -> None:
        """Serve until SIGINT or SIGTERM, or until the engine cannot serve again (the
        host's `fatal` says why), then close every connection with a goodbye."""
        on_ready(await self.start())
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError):  # Windows: Ctrl+C raises instead
                loop.add_signal_handler(signum, stop.set)

        def fatal(_reason: str) -> None:  # the supervisor's thread
            loop.call_soon_threadsafe(stop.set)

        self.host.on_fatal(fatal)
        try:
            await stop.wait()
        finally:
            await self.stop()

    # ---- routes -------------------------------------------------------------------------

    def _refuse_foreign(self, request: web.Request) -> None:
        refuse_foreign(request, self.config, self.metrics)

    def _authorize(self, request: web.Request) -> None:
        authorize(request, self.config, self.metrics)

    async def _moshi_chat(self, request: web.Request) -> web.StreamResponse:
        self._authorize(request)
        lease = self.host.try_lease()
        if lease is None:
            self.metrics.busy += 1
            message, retry_after = unavailable_answer(self.host)
            raise web.HTTPServiceUnavailable(
                text=json.dumps({"type": "busy", "message": message}),
                content_type="application/json", headers={"Retry-After": str(retry_after)})
        events = request.query.get(EVENTS_QUERY[0]) == EVENTS_QUERY[1]
        return await self._serve(request, MoshiCodec(events), lease)

    async def _reference_ws(self, request: web.Request) -> web.StreamResponse:
        self._authorize(request)
        lease = self.host.try_lease()
        if lease is None:
            self.metrics.busy += 1
            ws = self._websocket()
            await ws.prepare(request)
            message, retry_after = unavailable_answer(self.host)
            await ws.send_str(wire.encode_event(wire.Busy(message, retry_after)))
            await ws.close(code=WSCloseCode.TRY_AGAIN_LATER, message=b"busy")
            return ws
        return await self._serve(request, ReferenceCodec(), lease)

    def _websocket(self) -> web.WebSocketResponse:
        limits = self.config.limits
        return web.WebSocketResponse(max_msg_size=limits.hard_message_bytes,
                                     heartbeat=limits.heartbeat_s, compress=False)

    async def _serve(self, request: web.Request, codec: Codec,
                     lease: Lease) -> web.StreamResponse:
        ws = self._websocket()
        try:
            await ws.prepare(request)
        except BaseException:
            lease.release()
            raise
        connection = Connection(AiohttpSocket(ws, request), codec, lease, self.config.limits,
                                self.metrics)
        self._connections.add(connection)
        try:
            await connection.run()
        finally:
            self._connections.discard(connection)
        return ws

    async def _health(self, request: web.Request) -> web.Response:
        self._refuse_foreign(request)
        return web.json_response(health(self.host, self.metrics))

    async def _metrics(self, request: web.Request) -> web.Response:
        self._authorize(request)
        text = self.metrics.render(self.host.busy) + render_host_slots(self.host)
        return web.Response(text=text,
                            content_type="text/plain", charset="utf-8",
                            headers={"X-Content-Type-Options": "nosniff"})

    async def _on_shutdown(self, app: web.Application) -> None:
        for connection in list(self._connections):
            connection.shutdown()
        deadline = asyncio.get_running_loop().time() + 10.0
        while self._connections and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.05)
