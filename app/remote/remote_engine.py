"""A speech engine on another machine: a `SpeechEngine` (app/engine/speech_engine.py) for
the session and the pipeline, as the local engine's conversations are.

Only the speech model runs on the server, and with `asr_on_server` its speech recognition
(`serve --asr`): the server's `user_text` events become the recogniser's own events here
(engine_events.py), so the orchestrator hears them as a local recogniser's. The
orchestrator and the LLM stay in the app, as with a local engine, and the LLM's spans go
over the wire (the server's `span` message). That way one laptop setting (its Ollama, its
tools, its folders) serves whichever engine, and the server needs no LLM side of its own.

The audio goes as Opus where the server offers it (app/wire/opus.py), else as PCM.

The network runs on its own thread with its own asyncio loop (app/wire/client.py's
EngineClient); nothing here waits on the network from another thread, except `connect`,
which the session's thread calls once, bounded by a timeout. A stalled network is not
the end either: the engine says so (LinkStalled) after STALL_NOTICE_S without a word from
the server and when it is heard again (LinkResumed, with what was lost, if anything); the
connection's heartbeat rides out stalls of up to 15 s (app/wire/client.py), the server's too.
A dropped connection is not the end: the engine says so (ConnectionLost), tries again with a
growing pause, and says when it is back (Reconnected) — with a new conversation on the
server, whose model no longer has what was said or read before.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import queue
import socket
import statistics
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import aiohttp
import numpy as np

from app.cuts import cut_if_longer
from app.engine import events as ev
from app.engine.speech_engine import ConversationStats, EngineFacts
from app.remote.engine_events import EngineEventMapper, Mapped, SentSpan
from app.remote.events import (
    ConnectionLost,
    LinkEvent,
    LinkResumed,
    LinkStalled,
    NetworkStats,
    Reconnected,
    ReconnectFailed,
)
from app.remote.link_words import describe_busy, describe_disconnect
from app.remote.reach import host_and_port, unreachable_words
from app.wire import events as wire
from app.wire.client import (
    CONNECT_TIMEOUT_S,
    AudioFrame,
    ConnectError,
    Disconnected,
    EngineClient,
    ServerBusy,
    Unauthorized,
)

if TYPE_CHECKING:  # the catalog is imported when a conversation starts
    from app.checkpoints.catalog import Retrieval

log = logging.getLogger(__name__)

OUTBOX_FRAMES = 25  # 2 s of the user's audio waiting to be sent; more is dropped (counted)
# A server slower than real time (or a congested link) would let the delay grow without
# end: while the oldest frame sent has waited this long for its answer, new frames are
# dropped and counted, as a local engine drops what its full input queue cannot take.
MAX_LAG_S = 2.0
RETRY_DELAYS_S = (0.5, 1.0, 2.0, 4.0, 8.0)  # then every 8 s until Stop
# Frames go out and no audio or event comes back this long, though the server answers its
# pings: its conversation is stuck. Past the heartbeat's 15 s, which ends a stalled link.
SILENT_SERVER_S = 30.0
# Nothing at all from the server this long (its pongs come every second): the link stalls.
STALL_NOTICE_S = 2.0
RECEIVE_POLL_S = 0.25  # how often the receiver looks at the silence between events
RTT_WINDOW = 25  # frames in the round-trip median (2 s)
# A frame later than the fastest round trip by more than the playback buffer's priming
# margin (2 frames, app/audio/jitter_buffer.py) arrives after its turn to be played.
LATE_MARGIN_MS = 160.0
DEFAULT_SPAN_TOKENS = 512  # a model the app's catalog does not know: the catalog's default
# After the last frame of a file, how long its answers may take to come back.
DRAIN_S = 30.0


@dataclass(frozen=True)
class RemoteOptions:
    url: str
    token: str | None = None
    connect_timeout_s: float = 10.0
    voice: str | None = None  # sent before the first frame (persona checkpoints)
    role: str | None = None
    user_name: str | None = None
    user_city: str | None = None
    asr_on_server: bool = False  # the server's `user_text` is the user's words here
    audio: str = wire.OPUS  # asked of the server; PCM where it does not offer Opus
    # A microphone's frames: dropped (counted) once the oldest unanswered one waited this
    # long, so the delay never grows without end. None: a file's, never dropped (the
    # feeder waits for room instead, `wait_for_room`).
    max_lag_s: float | None = MAX_LAG_S
    # A dropped connection: try again (a live conversation), or end with an error (a file,
    # whose conversation the server lost with it).
    reconnect: bool = True


class RemoteEngineError(RuntimeError):
    """The server cannot be used: unreachable, a bad token, busy, or it failed."""


def _os_error(exc: BaseException) -> OSError | None:
    """The OSError behind a connection failure (aiohttp wraps it; the client keeps it as
    the cause), if there is one with something to say."""
    seen: BaseException | None = exc
    while seen is not None:
        inner = getattr(seen, "os_error", None)  # aiohttp's ClientConnectorError
        if isinstance(inner, OSError):
            return inner
        if isinstance(seen, OSError) and (seen.errno is not None
                                          or isinstance(seen, socket.gaierror)):
            return seen
        seen = seen.__cause__
    return None


def describe(exc: BaseException, url: str) -> str:
    """A connection failure in words a user can act on."""
    host = urlsplit(url if "://" in url else f"http://{url}").netloc or url
    if isinstance(exc, Unauthorized):
        return (f"the speech server at {host} refused the token (401): check the token in "
                "Settings → Speech model")
    if isinstance(exc, ServerBusy):
        return describe_busy(host, exc.busy)
    if isinstance(exc, (ConnectError, OSError, asyncio.TimeoutError)):
        reason = _os_error(exc)
        if reason is not None:
            try:
                name, port = host_and_port(url)
            except ValueError:
                pass
            else:
                return unreachable_words(reason, name, port, CONNECT_TIMEOUT_S,
                                         "Settings → Speech model → Speech engine")
        if isinstance(exc, asyncio.TimeoutError) or isinstance(exc.__cause__,
                                                               asyncio.TimeoutError):
            return (f"the speech server at {host} took the connection but did not answer in "
                    "time: it may still be loading its model (try again in a minute), or the "
                    "address is another program's")
        return f"cannot reach the speech server at {host}: {exc or type(exc).__name__}"
    return f"the speech server at {host} failed: {type(exc).__name__}: {exc}"


# What a server's engine says: the engine's events, the server's recognition's (with
# `asr_on_server`) and its link's.
RemoteEvent = Mapped | LinkEvent


class RemoteEngine:
    def __init__(self, options: RemoteOptions,
                 events: queue.SimpleQueue[RemoteEvent] | None = None) -> None:
        self.options = options
        # Its own queue: where its events wait when nobody gave it a sink.
        self.events: queue.SimpleQueue[RemoteEvent] = events or queue.SimpleQueue()
        self._sink: Callable[[RemoteEvent], None] = self.events.put
        self.dropped_frames = 0  # frames the outbox had no room for
        self.model_id = ""
        self.device = ""
        self.context_window = 0
        self.max_span_tokens = DEFAULT_SPAN_TOKENS
        self.span_tokens = 0  # what the server measured fits (its ready), 0: not said
        # The catalog's Retrieval for the model (None: end of turn).
        self.retrieval: Retrieval | None = None
        self.display_name = ""
        self._mapper = EngineEventMapper(asr=options.asr_on_server)
        self._ids = itertools.count(1)
        self._frames: queue.Queue[np.ndarray | None] = queue.Queue(maxsize=OUTBOX_FRAMES)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None  # frames to send, a stop, a retry now
        self._http: aiohttp.ClientSession | None = None
        self._client: EngineClient | None = None
        self._thread: threading.Thread | None = None
        self._connected = threading.Event()
        self._ever_connected = False
        self._first_result = threading.Event()
        self._first_error: str | None = None
        self._started = threading.Event()
        self._early: list[RemoteEvent] = []  # events before `start`: then to the sink
        self._early_lock = threading.Lock()
        self._stop = threading.Event()
        self._retry_now = threading.Event()
        self._input_done = False
        self._end_reason = "stopped"  # "error": the connection was lost for good (a file)
        self._rtts: deque[float] = deque(maxlen=RTT_WINDOW)
        self._fastest_rtt: float | None = None
        self.late_frames = 0
        self.stalls = 0  # times the link stalled (LinkStalled), and the longest, in seconds
        self.longest_stall_s = 0.0
        # When each frame sent on this connection that no audio answered yet was sent.
        self._in_flight: deque[float] = deque()
        self.most_in_flight = 0  # the most frames ever sent and not answered at once
        self._answered = threading.Condition()  # an answer came: room for a file's frame
        self._answered_async: asyncio.Event | None = None  # the same, for the drain
        self._network_rtt_ms: float | None = None  # the connection's own (pings), median
        self.audio_codec = wire.PCM  # the audio's codec on the current connection
        self.bytes_sent = 0  # on every connection, the audio and the messages
        self.bytes_received = 0
        self._client_bytes = (0, 0)  # the current connection's, already counted above
        # The same per stream ("audio", "text", "control"), each way: every connection's.
        self._streams: dict[str, Counter[str]] = {"sent": Counter(), "received": Counter()}
        self._client_streams: dict[str, Counter[str]] = {"sent": Counter(),
                                                         "received": Counter()}

    # ---- the session's thread ---------------------------------------------------------

    def connect(self, cancel: threading.Event | None = None) -> bool:
        """Start the network thread and wait for the server's `ready` (bounded; `cancel`
        set ends the wait: False). Raises RemoteEngineError with the reason when the server
        cannot be used."""
        if self._thread is not None:
            raise RuntimeError("a remote engine connects once")
        self._thread = threading.Thread(target=self._run, name="remote-engine", daemon=True)
        self._thread.start()
        wait = self.options.connect_timeout_s * 5 + 5.0  # context and voice restart it
        deadline = time.monotonic() + wait
        while not self._first_result.wait(0.1):
            if (cancel is not None and cancel.is_set()) or time.monotonic() > deadline:
                self.stop(0.0)
                if cancel is not None and cancel.is_set():
                    return False
                raise RemoteEngineError(f"no answer from the speech server at "
                                        f"{self.options.url} within {wait:g} s")
        if self._first_error is not None:
            raise RemoteEngineError(self._first_error)
        return self._ever_connected  # False: stopped before the server answered

    def send_events_to(self, sink: Callable[[RemoteEvent], None]) -> None:
        """Its events go to `sink` instead of its own queue (the pipeline's router); given
        before `start`."""
        self._sink = sink

    def start(self) -> None:
        """Events flow to the sink from now on (those said while connecting first)."""
        with self._early_lock:
            early, self._early = self._early, []
            self._started.set()
        self._put(ev.EngineReady(self.model_id, self.device, "", 0, None, 80.0,
                                 self.context_window, 0, span_tokens=self.span_tokens))
        for event in early:
            self._put(event)

    # ---- any thread ---------------------------------------------------------------------

    def push_frame(self, pcm: np.ndarray, timeout: float | None = 0.0) -> bool:
        """Queue one frame for the server, waiting at most `timeout` seconds for room (0 or
        None: never waits, the microphone's). False while disconnected (the frame is not
        sent: the server's conversation is gone anyway) or when the outbox stayed full
        (counted)."""
        if not self._connected.is_set() or self._input_done:
            return False
        frame = np.asarray(pcm, dtype=np.float32)
        try:
            if timeout:
                self._frames.put(frame, timeout=timeout)
            else:
                self._frames.put_nowait(frame)
        except queue.Full:
            self.dropped_frames += 1
            return False
        self._poke()
        return True

    def frames_unanswered(self) -> int:
        """Frames given and not answered yet: those in the outbox and those in flight."""
        return self._frames.qsize() + len(self._in_flight)

    def wait_for_room(self, most: int, timeout: float) -> bool:
        """Block until at most `most` frames are unanswered (a file's pace: the server's and
        the link's, never ahead of them). False on timeout, a stop or a lost connection."""
        deadline = time.monotonic() + timeout
        with self._answered:
            while self.frames_unanswered() > most:
                left = deadline - time.monotonic()
                if left <= 0 or self._stop.is_set() or not self._connected.is_set():
                    return False
                self._answered.wait(min(left, 0.5))
        return True

    def spans_pending(self) -> bool:
        """Spans sent that have not landed nor been refused."""
        return self._mapper.has_unlanded()

    def inject(self, text: str, source: str, at_frame: int = 0,
               origin_frame: int | None = None, deadline_frame: int | None = None) -> int:
        """Send a span; its id comes at once. While disconnected it is refused by a
        SpanRejected event (as the engine refuses a span it cannot take); after Stop,
        RuntimeError. `at_frame` and `deadline_frame` are the local engine's: here the
        orchestrator's own deadline check is what holds."""
        if self._stop.is_set():
            raise RuntimeError(f"the conversation has ended: the span from {source} was not "
                               "injected")
        span_id = next(self._ids)
        if not self._connected.is_set() or self._loop is None:
            self._put(ev.SpanRejected(span_id, source, "the connection to the speech server "
                                                       "is down"))
            return span_id
        # The wire takes so much of a span (more would be refused, and the span lost):
        # the rest could never be read anyway, and the cut is said with the span.
        text, cut = cut_if_longer("the text", text, wire.MAX_SPAN_CHARS,
                                  f"the speech server takes {wire.MAX_SPAN_CHARS:,} "
                                  "characters a span")
        self._mapper.sent(span_id, SentSpan(text, source, origin_frame,
                                            (cut,) if cut is not None else ()))
        loop = self._loop
        with contextlib.suppress(RuntimeError):  # the loop closed: the stop says the rest
            loop.call_soon_threadsafe(self._send_span, text, source, span_id)
        return span_id

    def reconnect_now(self) -> None:
        """Resume: try the server again without waiting for the next retry."""
        self._retry_now.set()
        self._poke()

    def network_stats(self) -> NetworkStats:
        rtts = list(self._rtts)
        frame_rtt = statistics.median(rtts) if rtts else None
        network = self._network_rtt_ms
        client = self._client
        sent, received = self.bytes_sent, self.bytes_received
        if client is not None:  # the current connection's, not yet added
            sent += client.bytes_sent - self._client_bytes[0]
            received += client.bytes_received - self._client_bytes[1]
        return NetworkStats(self._connected.is_set(), frame_rtt, self.late_frames,
                            network_rtt_ms=network, audio_codec=self.audio_codec,
                            bytes_sent=sent, bytes_received=received)

    def stream_bytes(self) -> dict[str, dict[str, int]]:
        """The link's payload bytes per stream ("audio", "text", "control"), "sent" and
        "received", over every connection of this conversation."""
        out = {way: Counter(counts) for way, counts in self._streams.items()}
        client = self._client
        if client is not None:  # the current connection's, not yet added
            for way in out:
                out[way].update(client.stream_bytes[way])
                out[way].subtract(self._client_streams[way])
        return {way: {k: v for k, v in counts.items() if v} for way, counts in out.items()}

    @property
    def connected(self) -> bool:
        return self._connected.is_set()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def facts(self) -> EngineFacts:
        """The server's model as its `ready` said (and the app's catalog knows it)."""
        return EngineFacts(
            model_id=self.model_id, display_name=self.display_name, device=self.device,
            dtype="", context_window=self.context_window,
            max_span_tokens=self.max_span_tokens, retrieval=self.retrieval,
            user_name=self.options.user_name, user_city=self.options.user_city)

    def stats(self) -> ConversationStats:
        """This client's view: the late frames it counted (the server keeps the rest)."""
        return ConversationStats(0, 0, self.late_frames, None, None, 0, self.dropped_frames)

    def finish_input(self, timeout: float | None = 10.0) -> None:
        """No more frames: those queued go out, then the conversation ends."""
        self._input_done = True
        with contextlib.suppress(queue.Full):
            self._frames.put(None, timeout=timeout)
        self._poke()

    def stop(self, timeout: float = 10.0) -> bool:
        self._stop.set()
        self._poke()
        if self._thread is None:
            return True
        self._thread.join(max(0.0, timeout))
        return not self._thread.is_alive()

    # ---- internals ----------------------------------------------------------------------

    def _put(self, event: RemoteEvent) -> None:
        with self._early_lock:
            if not self._started.is_set():
                self._early.append(event)
                return
        self._sink(event)

    def _poke(self) -> None:
        loop, wake = self._loop, self._wake
        if loop is not None and wake is not None:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(wake.set)

    def _send_span(self, text: str, source: str, span_id: int) -> None:
        client = self._client
        if client is None or not client.connected:
            for event in self._lose_spans("the connection to the speech server dropped"):
                self._put(event)
            return
        task = asyncio.ensure_future(client.send_span(text, source, str(span_id)))
        task.add_done_callback(lambda t: t.exception() if not t.cancelled() else None)

    def _lose_spans(self, reason: str) -> list[ev.SpanRejected]:
        return [ev.SpanRejected(span_id, span.source, reason)
                for span_id, span in self._mapper.unlanded()]

    def _run(self) -> None:
        reason = "stopped"
        try:
            asyncio.run(self._main())
            reason = self._end_reason
        except Exception as exc:  # a bug here must still end the conversation cleanly
            log.exception("the remote engine failed")
            reason = "error"
            self._put(ev.EngineError(f"the connection to the speech server failed: {exc}",
                                     fatal=True))
            if not self._first_result.is_set():
                self._first_error = f"{type(exc).__name__}: {exc}"
                self._first_result.set()
        finally:
            self._connected.clear()
            if self._first_result.is_set() and self._first_error is None:
                self._put(ev.EngineStopped(self._mapper.frames, reason))
            self._first_result.set()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._answered_async = asyncio.Event()
        # One HTTP session for every connection, closed here: a connection attempt given up
        # midway (Stop) would otherwise leave the one it made open.
        self._http = aiohttp.ClientSession()
        try:
            await self._connect_and_converse()
        finally:
            await self._http.close()

    async def _connect_and_converse(self) -> None:
        attempt = 0
        while not self._stop.is_set():
            try:
                client = await self._open_unless_stopped()
                if client is None:
                    return
            except Exception as exc:
                message = describe(exc, self.options.url)
                if not self._first_result.is_set():  # the first connection: Start fails
                    self._first_error = message
                    self._first_result.set()
                    return
                delay = RETRY_DELAYS_S[min(attempt, len(RETRY_DELAYS_S) - 1)]
                attempt += 1
                self._put(ReconnectFailed(message, delay))
                await self._pause(delay)
                continue
            if self._stop.is_set():
                await client.close()
                return
            attempt = 0
            first = not self._first_result.is_set()
            self._adopt(client.ready)
            self._client = client
            self._connected.set()
            self._ever_connected = True
            if first:
                self._first_result.set()
            else:
                self._put(Reconnected(self.model_id, self.device))
            why = await self._converse(client)
            self._connected.clear()
            self._count_bytes(client)
            self._client = None
            await client.close()
            self._drain_frames()
            with self._answered:  # a file's feeder waiting for room learns of the end
                self._answered.notify_all()
            if self._stop.is_set() or why == "end of input":
                return
            for event in self._lose_spans(f"the connection to the speech server was lost: "
                                          f"{why}"):
                self._put(event)
            if not self.options.reconnect:
                self._put(ev.EngineError(f"The connection to the speech server was lost "
                                         f"({why}).", fatal=True))
                self._end_reason = "error"
                return
            self._put(ConnectionLost(why, RETRY_DELAYS_S[0]))
            attempt = 0
            await self._pause(RETRY_DELAYS_S[0])

    async def _open_unless_stopped(self) -> EngineClient | None:
        """`_open`, given up at once when Stop comes (a silent host takes the whole timeout
        to fail, and the conversation's threads must end within seconds)."""
        assert self._wake is not None
        opening = asyncio.ensure_future(self._open())
        while not opening.done():
            if self._stop.is_set():
                opening.cancel()
                with contextlib.suppress(BaseException):
                    await opening
                return None
            self._wake.clear()
            waker = asyncio.ensure_future(self._wake.wait())
            await asyncio.wait({opening, waker}, timeout=0.5,
                               return_when=asyncio.FIRST_COMPLETED)
            waker.cancel()
        return opening.result()

    async def _open(self) -> EngineClient:
        """Connect, then send what the conversation starts with (each restarts it)."""
        o = self.options
        client = await EngineClient.connect(o.url, o.token or None, timeout=o.connect_timeout_s,
                                            session=self._http, audio=o.audio)
        self._client_bytes = (client.bytes_sent, client.bytes_received)
        self._client_streams = {way: Counter(c) for way, c in client.stream_bytes.items()}
        try:
            if o.voice:
                await client.send_voice(o.voice)
                await self._next_ready(client)
            if o.role or o.user_name or o.user_city:
                await client.send_context(o.role, o.user_name, o.user_city)
                await self._next_ready(client)
        except BaseException:
            await client.close()
            raise
        return client

    async def _next_ready(self, client: EngineClient) -> None:
        """Wait for the `ready` of the restarted conversation; errors become notices."""
        deadline = time.monotonic() + self.options.connect_timeout_s * 2
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ConnectError("the server did not restart the conversation in time")
            event = await client.receive(timeout=left)
            if isinstance(event, wire.Ready):
                return
            if isinstance(event, Disconnected):
                raise ConnectError(describe_disconnect(event.code, event.reason))
            for mapped in self._mapper.map(event):
                self._put(mapped)

    def _adopt(self, ready: wire.Ready) -> None:
        """What the server's `ready` says about its model, and a new conversation."""
        from app.checkpoints.catalog import CatalogError, get_manifest

        self.model_id, self.device = ready.model, ready.device
        self.context_window = ready.context_window
        self.span_tokens = ready.span_tokens
        self._mapper.new_conversation(ready)
        try:
            manifest = get_manifest(ready.model)
        except (CatalogError, ValueError, OSError):
            self.display_name = ready.model or "remote model"
            return
        self.display_name = manifest.display_name
        self.max_span_tokens = manifest.max_span_tokens
        self.retrieval = manifest.retrieval

    async def _pause(self, seconds: float) -> None:
        """Wait before the next attempt; Stop or Resume cut it short."""
        deadline = time.monotonic() + seconds
        assert self._wake is not None
        while not self._stop.is_set() and not self._retry_now.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self._wake.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), left)
        self._retry_now.clear()

    def _drain_frames(self) -> None:
        while True:
            try:
                self._frames.get_nowait()
            except queue.Empty:
                return

    async def _converse(self, client: EngineClient) -> str:
        """Send and receive until the connection ends or Stop; returns why it ended."""
        self._in_flight.clear()
        sender = asyncio.create_task(self._send_frames(client), name="remote-send")
        receiver = asyncio.create_task(self._receive(client), name="remote-receive")
        done, pending = await asyncio.wait({sender, receiver},
                                           return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
        for task in pending:
            with contextlib.suppress(BaseException):
                await task
        finished = next(iter(done))
        try:
            return finished.result()
        except Exception as exc:  # a send on a broken socket
            return f"{type(exc).__name__}: {exc}"

    async def _send_frames(self, client: EngineClient) -> str:
        assert self._wake is not None
        max_lag = self.options.max_lag_s
        while True:
            try:
                pcm = self._frames.get_nowait()
            except queue.Empty:
                self._wake.clear()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), 0.5)
                if self._stop.is_set():
                    return "stopped"
                continue
            if pcm is None:
                await self._drain_answers()
                return "end of input"
            now = time.monotonic()
            if max_lag is not None and self._in_flight and now - self._in_flight[0] > max_lag:
                self.dropped_frames += 1
                continue
            await client.send_frame_encoded(pcm)
            self._in_flight.append(now)
            self.most_in_flight = max(self.most_in_flight, len(self._in_flight))
            self.audio_codec = client.audio_codec

    async def _drain_answers(self) -> None:
        """The input ended: wait (bounded) for the answers to the frames in flight, so the
        last of a file's reply is not cut off when the connection closes."""
        assert self._answered_async is not None
        deadline = time.monotonic() + DRAIN_S
        while self._in_flight and not self._stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                log.warning("%d frames were still unanswered %g s after the input ended",
                            len(self._in_flight), DRAIN_S)
                return
            self._answered_async.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._answered_async.wait(), min(left, 0.5))

    async def _receive(self, client: EngineClient) -> str:
        last_heard = time.monotonic()
        stall = _Stall(self)
        try:
            while True:
                try:
                    event = await client.receive(timeout=RECEIVE_POLL_S)
                except asyncio.TimeoutError:
                    if self._stop.is_set():
                        return "stopped"
                    stall.look(client)
                    if self._in_flight and time.monotonic() - last_heard > SILENT_SERVER_S:
                        return f"nothing came back from the server for {SILENT_SERVER_S:g} s"
                    continue
                if not isinstance(event, Disconnected):  # an end is no resumption
                    stall.look(client)
                last_heard = time.monotonic()
                why = self._received(client, event)
                if why is not None:
                    return why
        finally:
            stall.end()

    def _received(self, client: EngineClient, event: object) -> str | None:
        """One event from the server; why the connection ended, if it did."""
        if isinstance(event, Disconnected):
            return describe_disconnect(event.code, event.reason)
        if client.network_rtts_ms:
            self._network_rtt_ms = statistics.median(client.network_rtts_ms)
        if isinstance(event, AudioFrame):
            self._on_audio(event)
        elif isinstance(event, wire.Ready):  # the server restarted the conversation
            self._in_flight.clear()  # what was still queued there is dropped
            self._adopt(event)
        else:
            if isinstance(event, wire.Error) and event.frame is not None and (
                    self._in_flight):
                self._in_flight.popleft()  # a refused frame: no audio will answer it
            for mapped in self._mapper.map(event):
                self._put(mapped)
        return None

    def _count_bytes(self, client: EngineClient) -> None:
        """Add what `client` sent and received since it was last counted."""
        sent, received = self._client_bytes
        self.bytes_sent += client.bytes_sent - sent
        self.bytes_received += client.bytes_received - received
        self._client_bytes = (client.bytes_sent, client.bytes_received)
        for way, counts in self._streams.items():
            counts.update(client.stream_bytes[way])
            counts.subtract(self._client_streams[way])
        self._client_streams = {way: Counter(c) for way, c in client.stream_bytes.items()}

    def _on_audio(self, frame: AudioFrame) -> None:
        if self._in_flight:
            self._in_flight.popleft()
        with self._answered:
            self._answered.notify_all()
        if self._answered_async is not None:
            self._answered_async.set()
        if frame.rtt_ms is not None:
            self._rtts.append(frame.rtt_ms)
            fastest = self._fastest_rtt
            self._fastest_rtt = frame.rtt_ms if fastest is None else min(fastest, frame.rtt_ms)
            if frame.rtt_ms - self._fastest_rtt > LATE_MARGIN_MS:
                self.late_frames += 1
        audio, stats = self._mapper.audio(frame.pcm)
        self._put(audio)
        for heard in self._mapper.first_audio(audio):
            self._put(heard)
        for quiet in self._mapper.quiet_recognition():
            self._put(quiet)
        self._put(stats)


class _Stall:
    """One connection's stalls: LinkStalled once the server has been silent STALL_NOTICE_S,
    LinkResumed (with the frames the stall cost) once it is heard again."""

    def __init__(self, engine: RemoteEngine) -> None:
        self.engine = engine
        self.since: float | None = None  # when the silence began, while stalled
        self.dropped_at_start = 0

    def look(self, client: EngineClient) -> None:
        silent = client.silent_s
        now = time.monotonic()
        if self.since is None:
            if silent >= STALL_NOTICE_S:
                engine = self.engine
                self.since = now - silent
                self.dropped_at_start = engine.dropped_frames
                engine.stalls += 1
                engine._put(LinkStalled(round(silent, 1), client.gives_up_s or SILENT_SERVER_S))
        elif silent < STALL_NOTICE_S:
            self._resumed(now - silent)

    def end(self) -> None:
        """The connection ended while stalled: its end says the rest (ConnectionLost)."""
        if self.since is not None:
            self._note(time.monotonic() - self.since)
            self.since = None

    def _resumed(self, heard_at: float) -> None:
        assert self.since is not None
        stalled = heard_at - self.since
        self._note(stalled)
        engine = self.engine
        engine._put(LinkResumed(round(stalled, 1),
                                engine.dropped_frames - self.dropped_at_start))
        self.since = None

    def _note(self, stalled: float) -> None:
        self.engine.longest_stall_s = max(self.engine.longest_stall_s, round(stalled, 1))
