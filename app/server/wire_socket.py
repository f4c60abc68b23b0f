"""One WebSocket, whichever server holds it: aiohttp (`serve`) or an ASGI app (`serve
--cluster`, where Ray Serve's proxy speaks ASGI). The connection logic sees only this.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from aiohttp import WSCloseCode, WSMsgType, web


@dataclass(frozen=True)
class Incoming:
    kind: Literal["binary", "text", "closed"]
    data: bytes | str = b""
    close_code: int | None = None  # for "closed": 1009 when a message was over the hard cap
    vanished: bool = False  # for "closed": the peer stopped answering the heartbeat

    @property
    def size(self) -> int:
        return len(self.data) if isinstance(self.data, bytes) else len(self.data.encode())


class WireSocket(Protocol):
    async def receive(self) -> Incoming: ...
    async def send(self, data: bytes | str) -> None: ...
    async def close(self, code: int, reason: str) -> None: ...
    def abort(self) -> None:
        """Drop the connection at once (a peer that stopped reading gets no goodbye)."""


class AiohttpSocket:
    def __init__(self, ws: web.WebSocketResponse, request: web.Request) -> None:
        self._ws = ws
        self._request = request

    async def receive(self) -> Incoming:
        msg = await self._ws.receive()
        if msg.type is WSMsgType.BINARY:
            return Incoming("binary", msg.data)
        if msg.type is WSMsgType.TEXT:
            return Incoming("text", msg.data)
        code = self._ws.close_code
        if msg.type is WSMsgType.ERROR and getattr(msg.data, "code", None):
            code = msg.data.code  # e.g. MESSAGE_TOO_BIG
        # aiohttp reports a ping left unanswered as an ERROR carrying a TimeoutError.
        vanished = msg.type is WSMsgType.ERROR and isinstance(msg.data, asyncio.TimeoutError)
        return Incoming("closed", close_code=code, vanished=vanished)

    async def send(self, data: bytes | str) -> None:
        if isinstance(data, bytes):
            await self._ws.send_bytes(data)
        else:
            await self._ws.send_str(data)

    async def close(self, code: int, reason: str) -> None:
        await self._ws.close(code=code, message=reason.encode("utf-8")[:120])

    def abort(self) -> None:
        transport = self._request.transport
        if transport is not None:
            transport.abort()


class AsgiSocket:
    """A Starlette WebSocket (duck-typed: starlette is only there with the cluster extra)."""

    def __init__(self, websocket: Any) -> None:
        self._ws = websocket
        self._closed = False

    async def receive(self) -> Incoming:
        if self._closed:
            return Incoming("closed")
        message = await self._ws.receive()
        if message["type"] == "websocket.receive":
            if message.get("bytes") is not None:
                return Incoming("binary", message["bytes"])
            return Incoming("text", message.get("text") or "")
        self._closed = True
        return Incoming("closed", close_code=message.get("code"))

    async def send(self, data: bytes | str) -> None:
        if isinstance(data, bytes):
            await self._ws.send_bytes(data)
        else:
            await self._ws.send_text(data)

    async def close(self, code: int, reason: str) -> None:
        if not self._closed:
            self._closed = True
            await self._ws.close(code=code, reason=reason[:120])

    def abort(self) -> None:
        if not self._closed:
            self._closed = True
            # ASGI has no abort: a close that is not waited for is the nearest thing.
            asyncio.ensure_future(self._ws.close(code=WSCloseCode.GOING_AWAY))
