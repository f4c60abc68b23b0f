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

The model's words (`text`) and the server's recognition (`user_text`) come as those events,
rebuilt here from the `words` messages the client asks for (each recognised word sent once,
a few frames' words a message: app/wire/words.py); an older server refuses the request and
sends them as before. What the link carries is counted per
stream: `stream_bytes` (audio, text: the model's and the user's words and spans, control:
the rest of the JSON).

`connect(..., audio="opus")` asks the server for Opus (app/wire/opus.py): frames go as PCM
until the server's `audio_codec` answer arrives, then as Opus both ways (~33 kbit/s instead
of 768). A server that does not know the request answers it with an error, which is kept
in `audio_refused`, and the audio stays PCM.

Besides the audio's own round trip (which holds the server's time for the frame), the
client pings the server every second: `network_rtts_ms` is the connection's round trip
alone, what the network costs.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl as ssl_module
import time
import uuid
from collections import Counter, OrderedDict, deque
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import aiohttp
import numpy as np

from app.frames import FRAME_SAMPLES
from app.wire import events as wire
from app.wire.opus import OpusError, OpusFrameReader, OpusFrameWriter
from app.wire.words import WordsReader

CONNECT_TIMEOUT_S = 30.0  # the first conversation's engine warms up before `ready`
# A ping after this long without a message from the server, a pong due within half of it:
# a server whose machine or network vanished is a `Disconnected` within 15 s, not a hang,
# and a network that stalls for less (Wi-Fi and mobile links stall for seconds) keeps the
# connection: what waited on either side flows on. `silent_s` says how long it has been.
HEARTBEAT_S = 10.0
PING_EVERY_S = 1.0  # the network's own round trip, measured this often
PINGS_KEPT = 5  # the network round trips the median is taken over
# After asking for Opus: the longest the frames after the first wait for the server's answer
# (it comes with the answer to the first frame, a round trip later).
CODEC_ANSWER_S = 5.0


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


def _retry_after(headers: object) -> float | None:
    """A 503's Retry-After in seconds (None: not said, or a date)."""
    value = headers.get("Retry-After") if hasattr(headers, "get") else None
    try:
        seconds = float(value) if value is not None else None
    except ValueError:
        return None
    return seconds if seconds is not None and 0 < seconds < 86400 else None


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
                 ready: wire.Ready, owns_session: bool, heartbeat: float | None = HEARTBEAT_S
                 ) -> None:
        self._session = session
        self._heartbeat = heartbeat
        self._owns_session = owns_session
        self._ws = ws
        self.ready = ready
        self._events: asyncio.Queue[ClientEvent] = asyncio.Queue()
        self._sent: OrderedDict[int, float] = OrderedDict()  # frame index -> send time
        self._frames_sent = 0
        self._closing = False
        self._ended = False
        self.round_trips_ms: list[float] = []
        self.bytes_sent = 0  # payloads: the audio's and the messages'
        self.bytes_received = 0
        self.audio_bytes_sent = 0  # the audio's alone
        self.audio_bytes_received = 0
        # The same payloads per stream: "audio", "text" (words), "control" (the rest).
        self.stream_bytes: dict[str, Counter[str]] = {"sent": Counter(), "received": Counter()}
        self.words_asked = False
        self.words_refused: str | None = None  # an older server's error for the request
        self._words = WordsReader()
        # The audio's codec each way: PCM until the server answered an Opus request.
        self.audio_asked = wire.PCM
        self.audio_codec = wire.PCM
        self.audio_refused: str | None = None  # the server's error for the request
        self._opus_in: OpusFrameReader | None = None
        self._opus_out: OpusFrameWriter | None = None
        self.broken_audio = 0  # server messages whose audio did not decode (silence played)
        self._codec_settled = asyncio.Event()  # the answer, a refusal, or the first audio
        self.network_rtts_ms: deque[float] = deque(maxlen=PINGS_KEPT)
        self._pings: dict[bytes, float] = {}  # payload -> when it was sent
        self._last_heard = time.monotonic()  # the server's last message of any kind
        self._reader = asyncio.create_task(self._read(), name="engine-client-reader")
        self._pinger = asyncio.create_task(self._ping(), name="engine-client-pinger")

    @classmethod
    async def connect(cls, url: str, token: str | None = None, *,
                      ssl: ssl_module.SSLContext | bool | None = None,
                      timeout: float = CONNECT_TIMEOUT_S,
                      session: aiohttp.ClientSession | None = None,
                      heartbeat: float | None = HEARTBEAT_S,
                      audio: str = wire.PCM, words: bool = True) -> EngineClient:
        """Connect and wait for `ready`. Raises Unauthorized, ServerBusy or ConnectError.
        `audio` "opus": ask for Opus; `words`: ask for the words once, a few frames' a
        message (see the module's docstring; False: a `text` and a whole `user_text` a
        word)."""
        if audio not in wire.AUDIO_CODECS:
            raise ValueError(f"audio is {' or '.join(wire.AUDIO_CODECS)}, not {audio!r}")
        owns = session is None
        session = session or aiohttp.ClientSession()
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        try:
            # Pings answered here (autoping off): their pongs time the network.
            ws = await asyncio.wait_for(session.ws_connect(
                ws_url(url), headers=headers, ssl=ssl if ssl is not None else True,
                compress=0, max_msg_size=0, heartbeat=heartbeat, autoping=False), timeout)
            first = await asyncio.wait_for(cls._first_message(ws), timeout)
        except aiohttp.WSServerHandshakeError as exc:
            await cls._cleanup(session, owns)
            if exc.status == 401:
                raise Unauthorized("the server wants a token (or another one)") from None
            if exc.status == 503:
                raise ServerBusy(wire.Busy("", _retry_after(exc.headers))) from None
            raise ConnectError(f"the server refused the connection: HTTP {exc.status}") from None
        except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as exc:
            await cls._cleanup(session, owns)
            # The OSError stays as the cause: remote/reach.py words it for the user.
            raise ConnectError(f"cannot reach {url}: {exc or type(exc).__name__}") from exc
        event = (wire.decode_event(first.data) if first.type == aiohttp.WSMsgType.TEXT
                 else None)
        if isinstance(event, wire.Ready):
            client = cls(session, ws, event, owns, heartbeat)
            if audio == wire.OPUS:
                client.audio_asked = wire.OPUS
                await client._send_json(wire.AudioCodecRequest(wire.OPUS))
            if words:
                client.words_asked = True
                await client._send_json(wire.WordsRequest())
            return client
        await ws.close()
        await cls._cleanup(session, owns)
        if isinstance(event, wire.Busy):
            raise ServerBusy(event)
        if isinstance(event, wire.Error):
            raise ConnectError(f"{event.stage}: {event.message}")
        raise ConnectError(f"the server answered {first.type.name} instead of ready "
                           f"(close code {ws.close_code})")

    @staticmethod
    async def _first_message(ws: aiohttp.ClientWebSocketResponse) -> aiohttp.WSMessage:
        """The server's first message, its heartbeat's pings answered meanwhile (the engine
        may take seconds to warm up before `ready`)."""
        while True:
            message = await ws.receive()
            if message.type == aiohttp.WSMsgType.PING:
                await ws.pong(message.data)
            elif message.type != aiohttp.WSMsgType.PONG:
                return message

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

    @property
    def silent_s(self) -> float:
        """Seconds since the server's last message of any kind (its pongs come every
        second on a working link: more than a few seconds is a stalled network)."""
        return time.monotonic() - self._last_heard

    @property
    def gives_up_s(self) -> float | None:
        """The silence after which the heartbeat ends the connection (None: no heartbeat)."""
        heartbeat = self._heartbeat
        return None if heartbeat is None else heartbeat * 1.5

    async def send_frame(self, pcm: np.ndarray) -> int:
        """One 80 ms frame (float32 [1920] at 24 kHz); returns its index."""
        pcm = np.asarray(pcm, dtype=np.float32)
        if pcm.shape != (FRAME_SAMPLES,):
            raise ValueError(f"a frame is {FRAME_SAMPLES} samples, got shape {pcm.shape}")
        return await self.send_raw(pcm.astype("<f4").tobytes())

    async def send_frame_encoded(self, pcm: np.ndarray) -> int:
        """One frame in the audio codec agreed on: Opus once the server answered, else
        float32 PCM. Returns its index. After asking for Opus, the first frame goes as PCM
        and the next wait (at most CODEC_ANSWER_S) until the server's first audio says
        which it is: its answer comes just before that audio, a refusal before it."""
        if self.audio_asked == wire.OPUS and self._frames_sent >= 1:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._codec_settled.wait(), CODEC_ANSWER_S)
        if self._opus_out is None:
            return await self.send_frame(pcm)
        return await self.send_raw(self._opus_out.pages(pcm))

    async def send_raw(self, data: bytes) -> int:
        """A binary message as it is (the server takes each as a frame, or refuses it)."""
        index = self._frames_sent
        self._frames_sent += 1
        self._sent[index] = time.perf_counter()
        await self._ws.send_bytes(data)
        self.bytes_sent += len(data)
        self.audio_bytes_sent += len(data)
        self.stream_bytes["sent"]["audio"] += len(data)
        return index

    async def _send_json(self, message: wire.ClientMessage | wire.AudioCodecRequest
                         | wire.WordsRequest) -> None:
        text = wire.encode_request(message)
        await self._ws.send_str(text)
        size = len(text.encode())
        self.bytes_sent += size
        stream = "text" if isinstance(message, wire.SpanRequest) else "control"
        self.stream_bytes["sent"][stream] += size

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

    async def send_clone(self, pcm: np.ndarray) -> None:
        """The user's own voice (float32 mono at 24 kHz, 2 to 30 s) for the conversation's
        voice prompt (a PersonaPlex-family model): it restarts in that voice, a new `ready`
        follows (app/server/voice_clone.py)."""
        text = '{"type": "clone"}'
        await self._ws.send_str(text)
        data = np.asarray(pcm, dtype="<f4").tobytes()
        await self._ws.send_bytes(data)
        self.bytes_sent += len(text) + len(data)

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
            while True:
                message = await self._ws.receive()
                self._last_heard = time.monotonic()
                if message.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSING,
                                    aiohttp.WSMsgType.CLOSED):
                    if message.type == aiohttp.WSMsgType.CLOSE and message.extra:
                        reason = str(message.extra)  # the server's reason, e.g. "idle"
                    break
                if message.type == aiohttp.WSMsgType.BINARY:
                    self.bytes_received += len(message.data)
                    self.audio_bytes_received += len(message.data)
                    self.stream_bytes["received"]["audio"] += len(message.data)
                    for frame in self._audio(message.data):
                        self._events.put_nowait(frame)
                elif message.type == aiohttp.WSMsgType.TEXT:
                    self.bytes_received += len(message.data.encode())
                    for event in self._events_of(message.data):
                        self._events.put_nowait(event)
                elif message.type == aiohttp.WSMsgType.PING:
                    # A socket closing already: its end is the next message, with the
                    # reason (a pong that cannot be written is not it).
                    with contextlib.suppress(ConnectionError, RuntimeError):
                        await self._ws.pong(message.data)
                elif message.type == aiohttp.WSMsgType.PONG:
                    self._ponged(message.data)
                elif message.type == aiohttp.WSMsgType.ERROR:
                    reason = f"error: {self._ws.exception()}"
                    break
        except Exception as exc:  # the connection broke: an event, not an exception
            reason = f"{type(exc).__name__}: {exc}"
        finally:
            self._ended = True
            self._codec_settled.set()  # nothing more will come: no frame waits for it
            self._events.put_nowait(Disconnected(self._ws.close_code, reason, self._closing))

    def _audio(self, data: bytes) -> list[AudioFrame]:
        """The frames one binary message holds: one PCM frame, or one frame's Opus pages
        (one that does not decode is a frame of silence: it still answers a frame sent)."""
        self._codec_settled.set()  # an answer for Opus would have come before this audio
        if self._opus_in is None:
            return [self._answer(np.frombuffer(data, dtype="<f4").astype(np.float32))]
        try:
            return [self._answer(pcm) for pcm in self._opus_in.frames(data)]
        except OpusError:
            self.broken_audio += 1
            return [self._answer(np.zeros(FRAME_SAMPLES, dtype=np.float32))]

    def _answer(self, pcm: np.ndarray) -> AudioFrame:
        now = time.perf_counter()
        if not self._sent:
            return AudioFrame(pcm, None, None)
        index, sent_at = self._sent.popitem(last=False)
        rtt = (now - sent_at) * 1000.0
        self.round_trips_ms.append(rtt)
        return AudioFrame(pcm, index, rtt)

    def _events_of(self, text: str) -> list[wire.ServerEvent | wire.UnknownEvent]:
        """A text message's events: one, those a `words` stands for, or none (what this
        client handles itself, the codec's answer)."""
        try:
            event = wire.decode_event(text)
        except ValueError:
            event = wire.UnknownEvent("", {"text": text})
        kind = event.type if isinstance(event, wire.UnknownEvent) else event.TYPE
        stream = "text" if kind in wire.TEXT_EVENTS else "control"
        self.stream_bytes["received"][stream] += len(text.encode())
        if isinstance(event, wire.UnknownEvent):
            return [event]
        if isinstance(event, wire.Words):
            return list(self._words.events(event))  # the events the server's codec held
        if (isinstance(event, wire.Error) and event.stage == "message"
                and self.words_asked and self.words_refused is None
                and f"{wire.WordsRequest.TYPE!r}" in event.message):
            self.words_refused = event.message  # an older server: event by event it is
            return []
        if isinstance(event, wire.AudioCodec):
            if event.codec == wire.OPUS and self.audio_asked == wire.OPUS:
                self._opus_in, self._opus_out = OpusFrameReader(), OpusFrameWriter()
                self.audio_codec = wire.OPUS
            self._codec_settled.set()
            return []
        if (isinstance(event, wire.Error) and event.stage == "message"
                and self.audio_asked != wire.PCM and self.audio_codec == wire.PCM
                and self.audio_refused is None and wire.AudioCodecRequest.TYPE in event.message):
            self.audio_refused = event.message  # an older server: the audio stays PCM
            self._codec_settled.set()
            return []
        if isinstance(event, wire.Ready):
            self.ready = event
            self._words.new_conversation()  # as the server's writer did
            for index in [i for i in self._sent if i < event.frames_received]:
                del self._sent[index]  # the conversation they were for has ended
        elif isinstance(event, wire.Error) and event.frame is not None:
            self._sent.pop(event.frame, None)  # refused: no audio will answer it
        return [event]

    # ---- the network's own round trip ----------------------------------------------------

    async def _ping(self) -> None:
        number = 0
        while not self._ws.closed:
            payload = number.to_bytes(8, "big")
            number += 1
            self._pings = {p: t for p, t in self._pings.items()
                           if time.perf_counter() - t < 30.0}  # pongs lost: forgotten
            self._pings[payload] = time.perf_counter()
            with contextlib.suppress(Exception):  # a broken socket: the reader says so
                await self._ws.ping(payload)
            await asyncio.sleep(PING_EVERY_S)

    def _ponged(self, payload: bytes) -> None:
        sent = self._pings.pop(bytes(payload), None)
        if sent is not None:
            self.network_rtts_ms.append((time.perf_counter() - sent) * 1000.0)

    async def close(self) -> None:
        self._closing = True
        self._pinger.cancel()
        with contextlib.suppress(BaseException):
            await self._pinger
        with contextlib.suppress(Exception):
            await self._ws.close()
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(self._reader, 5.0)
        if self._owns_session:
            await self._session.close()
