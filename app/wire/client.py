"""An asyncio client of the server's `/ws` (the Context Spanning reference's protocol), for
the desktop app, the tests and the benchmark.

    async with await EngineClient.connect("http://gpu-box:8998", token) as client:
        await client.send_frame(pcm)                      # float32 [1920] at 24 kHz
        await client.send_span("Canberra is the capital of Australia.", "notes")
        event = await client.receive(timeout=1.0)         # AudioFrame, a wire event, or
                                                          # Disconnected (once, at the end)

Events are typed (wire_events.py); audio comes as `AudioFrame`, with the round trip of the
frame it answers: the server steps once per frame and answers each in order, so the n-th
frame back answers the n-th frame sent that the server took (a refused frame is named in
its `error` event; a `ready` after a reset says from which frame the new conversation
counts). Reconnecting is the caller's choice: a dropped connection is a `Disconnected`
event, never an exception out of `receive`.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl as ssl_module
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import aiohttp
import numpy as np

from app.frames import FRAME_SAMPLES
from app.wire import events as wire

CONNECT_TIMEOUT_S = 30.0  # the first conversation's engine warms up before `ready`
# A ping after this long without a message from the server, a pong due within half of it:
# a server whose machine or network vanished is a `Disconnected` within 3 s, not a hang.
HEARTBEAT_S = 2.0


@dataclass(frozen=True)
class AudioFrame:
    pcm: np.ndarray  # float32 [1920] at 24 kHz
    index: int | None  # the sent frame it answers (None if not known)
    rtt_ms: float | None  # from sending that frame to receiving this one


@dataclass(frozen=True)
class Disconnected:
    code: int | None
    reason: str
    by_client: bool  # `close()` ended it; otherwise the server or the network did


ClientEvent = AudioFrame | wire.ServerEvent | wire.UnknownEvent | Disconnected


class ConnectError(ConnectionError):
    pass


class Unauthorized(ConnectError):
    pass


class ServerBusy(ConnectError):
    def __init__(self, busy: wire.Busy) -> None:
        super().__init__(busy.message)
        self.busy = busy


def ws_url(url: str) -> str:
    """`http(s)://host:port[/ws]` or `ws(s)://...` -> the `/ws` WebSocket URL."""
    parts = urlsplit(url if "://" in url else f"http://{url}")
    scheme = {"http": "ws", "https": "wss"}.get(parts.scheme, parts.scheme)
    if scheme not in ("ws", "wss"):
        raise ValueError(f"not a server URL: {url}")
    path = parts.path.rstrip("/")
    if not path.endswith("/ws"):
        path += "/ws"
    return urlunsplit((scheme, parts.netloc, path, parts.query, ""))


class EngineClient:
    def __init__(self, session: aiohttp.ClientSession, ws: aiohttp.ClientWebSocketResponse,
                 ready: wire.Ready, owns_session: bool) -> None:
        self._session = session
        self._owns_session = owns_session
        self._ws = ws
        self.ready = ready
        self._events: asyncio.Queue[ClientEvent] = asyncio.Queue()
        self._sent: OrderedDict[int, float] = OrderedDict()  # frame index -> send time
        self._frames_sent = 0
        self._closing = False
        self._ended = False
        self.round_trips_ms: list[float] = []
        self.bytes_sent = 0
        self.bytes_received = 0
        self._reader = asyncio.create_task(self._read(), name="engine-client-reader")

    @classmethod
    async def connect(cls, url: str, token: str | None = None, *,
                      ssl: ssl_module.SSLContext | bool | None = None,
                      timeout: float = CONNECT_TIMEOUT_S,
                      session: aiohttp.ClientSession | None = None,
                      heartbeat: float | None = HEARTBEAT_S) -> EngineClient:
        """Connect and wait for `ready`. Raises Unauthorized, ServerBusy or ConnectError."""
        owns = session is None
        session = session or aiohttp.ClientSession()
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        try:
            ws = await asyncio.wait_for(session.ws_connect(
                ws_url(url), headers=headers, ssl=ssl if ssl is not None else True,
                compress=0, max_msg_size=0, heartbeat=heartbeat), timeout)
            first = await asyncio.wait_for(ws.receive(), timeout)
        except aiohttp.WSServerHandshakeError as exc:
            await cls._cleanup(session, owns)
            if exc.status == 401:
                raise Unauthorized("the server wants a token (or another one)") from None
            if exc.status == 503:
                raise ServerBusy(wire.Busy(exc.message or "the server is busy")) from None
            raise ConnectError(f"the server refused the connection: HTTP {exc.status}") from None
        except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as exc:
            await cls._cleanup(session, owns)
            raise ConnectError(f"cannot reach {url}: {exc or type(exc).__name__}") from None
        event = (wire.decode_event(first.data) if first.type == aiohttp.WSMsgType.TEXT
                 else None)
        if isinstance(event, wire.Ready):
            return cls(session, ws, event, owns)
        await ws.close()
        await cls._cleanup(session, owns)
        if isinstance(event, wire.Busy):
            raise ServerBusy(event)
        if isinstance(event, wire.Error):
            raise ConnectError(f"{event.stage}: {event.message}")
        raise ConnectError(f"the server answered {first.type.name} instead of ready "
                           f"(close code {ws.close_code})")

    @staticmethod
    async def _cleanup(session: aiohttp.ClientSession, owns: bool) -> None:
        if owns:
            await session.close()

    async def __aenter__(self) -> EngineClient:
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self.close()

    # ---- sending ------------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        return not self._ws.closed

    async def send_frame(self, pcm: np.ndarray) -> int:
        """One 80 ms frame (float32 [1920] at 24 kHz); returns its index."""
        pcm = np.asarray(pcm, dtype=np.float32)
        if pcm.shape != (FRAME_SAMPLES,):
            raise ValueError(f"a frame is {FRAME_SAMPLES} samples, got shape {pcm.shape}")
        return await self.send_raw(pcm.astype("<f4").tobytes())

    async def send_raw(self, data: bytes) -> int:
        """A binary message as it is (the server takes each as a frame, or refuses it)."""
        index = self._frames_sent
        self._frames_sent += 1
        self._sent[index] = time.perf_counter()
        await self._ws.send_bytes(data)
        self.bytes_sent += len(data)
        return index

    async def _send_json(self, message: wire.ClientMessage) -> None:
        text = wire.encode_request(message)
        await self._ws.send_str(text)
        self.bytes_sent += len(text.encode())

    async def send_span(self, text: str, source: str = "client", span_id: str | None = None
                        ) -> str:
        """Inject `text` into the model's context; returns the id its `span_queued` (or
        `span_rejected`) event echoes. Then `span_accepted`, and `span` when it landed."""
        span_id = span_id or uuid.uuid4().hex[:12]
        await self._send_json(wire.SpanRequest(text, source, span_id))
        return span_id

    async def send_context(self, persona: str | None = None, name: str | None = None,
                           city: str | None = None) -> None:
        """Before the first frame only: the conversation restarts with them (a new
        `ready`)."""
        await self._send_json(wire.ContextRequest(persona, name, city))

    async def send_voice(self, name: str) -> None:
        await self._send_json(wire.VoiceRequest(name))

    async def reset(self) -> None:
        """A new conversation on this connection: a new `ready` follows."""
        await self._send_json(wire.ResetRequest())

    # ---- receiving ----------------------------------------------------------------------

    async def receive(self, timeout: float | None = None) -> ClientEvent:
        """The next event; after the connection ended, `Disconnected` again and again.
        Raises asyncio.TimeoutError when none came within `timeout`."""
        if not self._events.empty():
            return self._events.get_nowait()
        if self._ended:
            return Disconnected(self._ws.close_code, "closed", self._closing)
        # Not wait_for(get()): on Python 3.11 a timeout racing the item can lose the item.
        getter = asyncio.ensure_future(self._events.get())
        await asyncio.wait({getter}, timeout=timeout)
        if getter.done():
            return getter.result()
        getter.cancel()
        raise asyncio.TimeoutError

    async def _read(self) -> None:
        reason = "closed"
        try:
            async for message in self._ws:
                if message.type == aiohttp.WSMsgType.BINARY:
                    self.bytes_received += len(message.data)
                    self._events.put_nowait(self._audio(message.data))
                elif message.type == aiohttp.WSMsgType.TEXT:
                    self.bytes_received += len(message.data.encode())
                    self._events.put_nowait(self._event(message.data))
                elif message.type == aiohttp.WSMsgType.ERROR:
                    reason = f"error: {self._ws.exception()}"
                    break
        except Exception as exc:  # the connection broke: an event, not an exception
            reason = f"{type(exc).__name__}: {exc}"
        finally:
            self._ended = True
            self._events.put_nowait(Disconnected(self._ws.close_code, reason, self._closing))

    def _audio(self, data: bytes) -> AudioFrame:
        now = time.perf_counter()
        pcm = np.frombuffer(data, dtype="<f4").astype(np.float32)
        if not self._sent:
            return AudioFrame(pcm, None, None)
        index, sent_at = self._sent.popitem(last=False)
        rtt = (now - sent_at) * 1000.0
        self.round_trips_ms.append(rtt)
        return AudioFrame(pcm, index, rtt)

    def _event(self, text: str) -> wire.ServerEvent | wire.UnknownEvent:
        try:
            event = wire.decode_event(text)
        except ValueError:
            return wire.UnknownEvent("", {"text": text})
        if isinstance(event, wire.Ready):
            self.ready = event
            for index in [i for i in self._sent if i < event.frames_received]:
                del self._sent[index]  # the conversation they were for has ended
        elif isinstance(event, wire.Error) and event.frame is not None:
            self._sent.pop(event.frame, None)  # refused: no audio will answer it
        return event

    async def close(self) -> None:
        self._closing = True
        with contextlib.suppress(Exception):
            await self._ws.close()
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(self._reader, 5.0)
        if self._owns_session:
            await self._session.close()
