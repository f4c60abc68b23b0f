"""One client connection holding the engine: its conversation(s), from the first frame to
the last message, whichever protocol (the codec) it speaks.

Four tasks run side by side, so none waits on another:
- reading: every message is taken off the socket at once, so the socket's heartbeat is
  answered and a vanished client is found even while a reset restarts the engine;
- processing, in order: frames go to the engine (a full engine queue is waited for, never
  dropped: the client paces the conversation, one step per frame, as the reference serves
  it); span, context, voice and reset messages are applied; garbage is refused with an error
  event;
- sending: one ordered queue of audio and events to the socket;
- watching: the idle timeout, the maximum length, and a client that stopped reading (audio
  older than `max_send_lag_s`, or a send stuck that long): such a client is dropped.
Engine events reach the loop from the pipeline's thread (conversation.py) and are mapped to
the wire's events here. Whatever ends the connection, the engine is stopped off the loop and
the slot is given back once its thread has ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

from aiohttp import WSCloseCode

from app.engine import events as ev
from app.engine.speech_engine import EngineOptions
from app.frames import FRAME_SAMPLES, SAMPLE_RATE
from app.server.codec import Codec, Frame, Goodbye
from app.server.config import Limits
from app.server.conversation import Conversation
from app.server.engine_host import ConversationChoice, Lease
from app.server.event_mapping import WireMapper
from app.server.metrics import ServerMetrics
from app.server.voice_clone import (
    Cloned,
    VoiceRecording,
    encode_cloned,
    prompt_frames,
    write_recording,
)
from app.server.wire_socket import Incoming, WireSocket
from app.wire import events as wire

log = logging.getLogger(__name__)

_PUSH_WAIT_S = 0.005  # how often a full engine queue is looked at again
_WATCH_EVERY_S = 0.1
# Messages read but not yet processed: about 20 s of frames. A client further ahead than
# that waits at its socket (TCP's flow control), never losing a frame.
INBOX_MESSAGES = 256
CLOSE_TIMEOUT_S = 2.0


@dataclass(frozen=True)
class _Out:
    data: bytes | str
    audio_ready_s: float | None = None  # for audio: when the engine made it (monotonic)


@dataclass(frozen=True)
class _Close:
    code: int
    reason: str


class Connection:
    def __init__(self, socket: WireSocket, codec: Codec, lease: Lease, limits: Limits,
                 metrics: ServerMetrics) -> None:
        self.socket = socket
        self.codec = codec
        self.lease = lease
        self.host = lease.host
        self.limits = limits
        self.metrics = metrics
        self.choice = ConversationChoice()
        self._out: asyncio.Queue[_Out | _Close] = asyncio.Queue()
        self._inbox: asyncio.Queue[Incoming] = asyncio.Queue(INBOX_MESSAGES)
        self._conversation: Conversation | None = None
        self._forwarder: asyncio.Task[None] | None = None
        self._stopping: asyncio.Future[bool] | None = None  # an engine being stopped
        self._number = 0
        self._talking = False  # a frame reached the current conversation
        self._restart_asked = False  # a reset, voice or context waits for the burst to end
        self._frames_at_start = 0
        self._opened: float | None = None  # the first `ready`: the length limit counts from it
        self._last_heard = time.monotonic()
        self._send_started: float | None = None
        self._goodbye: tuple[str, float] | None = None  # why the server closes, and since when
        self._pending_voice: str | None = None
        self._engine_stuck = False
        self._warming = True  # no idle clock while the engine warms up
        self._inbox_bytes = 0  # of the messages read and not yet processed
        self._inbox_drained = asyncio.Event()
        self._pending_clone: Cloned | None = None  # said once its conversation is ready
        self._clone_folder: Path | None = None  # this connection's recordings, as WAV
        self._clones = 0
        conversation_config = self.host.conversation
        self._llm_on_server = conversation_config is not None and conversation_config.has_llm

    # ---- the connection's life ----------------------------------------------------------

    async def run(self) -> str:
        """Serve until the connection ends; returns why it ended."""
        reason = "error"
        tasks: list[asyncio.Task[str]] = []
        try:
            # Reading starts before the engine is built (seconds for a large model), so the
            # heartbeat is answered from the first moment.
            tasks = [asyncio.create_task(self._read(), name="read"),
                     asyncio.create_task(self._process(), name="process"),
                     asyncio.create_task(self._send(), name="send"),
                     asyncio.create_task(self._watch(), name="watch")]
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            reason = next(iter(done)).result()
            if self._goodbye is not None and reason == "client closed":
                reason = self._goodbye[0]  # the client only answered the server's close
        except Exception as exc:  # a failure here must still free the engine
            log.exception("connection failed")
            reason = "error"
            with contextlib.suppress(Exception):
                for data in self.codec.event(wire.Error("engine", f"{type(exc).__name__}: "
                                                                  f"{exc}")):
                    await asyncio.wait_for(self.socket.send(data), CLOSE_TIMEOUT_S)
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(BaseException):
                    await task
            await self._close_conversation()
            self.lease.release(engine_stopped=not self._engine_stuck)
            if self._clone_folder is not None:  # read at each start: kept until the end
                shutil.rmtree(self._clone_folder, ignore_errors=True)
            if reason == "slow client":
                self.socket.abort()
            else:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(self.socket.close(WSCloseCode.OK, reason),
                                           CLOSE_TIMEOUT_S)
            self.metrics.closed[reason] += 1
            log.info("connection closed (%s): %s", self.codec.protocol, reason)
        return reason

    def shutdown(self) -> None:
        """The server is stopping: say so, then close."""
        self._say_goodbye(wire.Error("shutdown", "the server is shutting down"),
                          WSCloseCode.GOING_AWAY, "server shutdown")

    # ---- conversations ------------------------------------------------------------------

    async def _open_conversation(self, unheard: int = 0) -> None:
        """`unheard`: frames the codec has decoded that go to this conversation."""
        loop = asyncio.get_running_loop()
        engine, pipeline = await loop.run_in_executor(None, self.lease.build, self.choice)
        conversation = Conversation(engine, pipeline, loop)
        conversation.start()
        self._conversation = conversation
        self._warming = True
        self._number += 1
        self._talking = False
        self._frames_at_start = self.codec.frames_received - unheard
        self.metrics.sessions[self.codec.protocol] += 1
        self.metrics.sessions_active += 1
        self._forwarder = asyncio.create_task(self._forward(conversation), name="forward")

    async def _close_conversation(self) -> bool:
        """Stop the engine (off the loop); True when its threads ended. A stop already
        under way (a reset cancelled when the client left) is awaited too: the slot is
        never given back while an engine thread still runs."""
        conversation, self._conversation = self._conversation, None
        if self._forwarder is not None:
            self._forwarder.cancel()
            with contextlib.suppress(BaseException):
                await self._forwarder
            self._forwarder = None
        if conversation is not None:
            self._stopping = asyncio.ensure_future(self._stop(conversation))
        if self._stopping is None:
            return True
        stopped = await asyncio.shield(self._stopping)
        self._stopping = None
        return stopped

    async def _stop(self, conversation: Conversation) -> bool:
        loop = asyncio.get_running_loop()
        stopped = await loop.run_in_executor(None, conversation.stop,
                                             self.limits.stop_timeout_s)
        # The frames it made after the forwarder stopped still count (their FrameStats
        # reached the loop before the stop returned).
        while not conversation.events.empty():
            event = conversation.events.get_nowait()
            if isinstance(event, ev.FrameStats):
                self.metrics.observe_frame(event.frame_ms)
        self.metrics.sessions_active -= 1
        self._engine_stuck = self._engine_stuck or not stopped
        return stopped

    def _ask_restart(self) -> None:
        """A new conversation on this connection (context, voice or reset), built once the
        messages already waiting are read: a burst of them costs one engine, not one each.
        The next conversation has heard nothing yet, so a voice may follow a reset."""
        self._restart_asked = True
        self._talking = False

    async def _restart_if_asked(self, unheard: int = 0) -> None:
        if not self._restart_asked:
            return
        self._restart_asked = False
        if not await self._close_conversation():
            raise RuntimeError("the engine did not stop")
        await self._open_conversation(unheard)

    # ---- engine -> client ---------------------------------------------------------------

    async def _forward(self, conversation: Conversation) -> None:
        mapper = WireMapper(llm_on_server=self._llm_on_server)
        while True:
            event = await conversation.events.get()
            if isinstance(event, ev.AudioOut):
                for data in self.codec.audio(event.pcm):
                    self._out.put_nowait(_Out(data, event.monotonic_s))
            elif isinstance(event, ev.FrameStats):
                self.metrics.observe_frame(event.frame_ms)
            elif isinstance(event, ev.EngineReady):
                self._ready(event, conversation)
            elif isinstance(event, ev.EngineStopped):
                # Only an engine that failed stops on its own: we never end its input.
                self._say_goodbye(wire.Error("engine", f"the engine stopped: {event.reason}"),
                                  WSCloseCode.INTERNAL_ERROR, "engine stopped")
                return
            else:
                for item in mapper.map(event):
                    self._count_span(item)
                    self._emit(item)

    def _ready(self, event: ev.EngineReady, conversation: Conversation) -> None:
        self._warming = False
        self._last_heard = time.monotonic()  # the client's turn starts now
        if self._opened is None:
            self._opened = self._last_heard
        if self._pending_voice is not None:
            self._emit(wire.Voice(self._pending_voice))
            self._pending_voice = None
        if self._pending_clone is not None:
            # The conversation about to begin, now in the cloned voice: `cloned`, not a
            # second `ready` (the reference's page opens its microphone to record a voice
            # on every `ready` while it clones).
            self._out.put_nowait(_Out(encode_cloned(self._pending_clone)))
            self._pending_clone = None
            return
        ready = wire.Ready(SAMPLE_RATE, FRAME_SAMPLES, self.host.persona_for(self.choice),
                           event.model_id, event.device, self._number, self._frames_at_start,
                           event.chunk_limit, event.context_window, event.span_tokens)
        for data in self.codec.ready(ready):
            self._out.put_nowait(_Out(data))

    def _count_span(self, item: wire.ServerEvent) -> None:
        outcome = {wire.Span: "injected", wire.SpanRejected: "rejected",
                   wire.Late: "late"}.get(type(item))
        if outcome is not None:
            self.metrics.spans[outcome] += 1

    def _emit(self, event: wire.ServerEvent) -> None:
        for data in self.codec.event(event):
            self._out.put_nowait(_Out(data))

    def _say_goodbye(self, event: wire.Error, code: int, reason: str) -> None:
        if self._goodbye is not None:
            return
        self._goodbye = (reason, time.monotonic())
        self._emit(event)
        self._out.put_nowait(_Close(code, reason))

    async def _send(self) -> str:
        lag = self.limits.max_send_lag_s
        while True:
            item = await self._out.get()
            if isinstance(item, _Close):
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(self.socket.close(item.code, item.reason),
                                           CLOSE_TIMEOUT_S)
                return item.reason
            now = time.monotonic()
            if item.audio_ready_s is not None and now - item.audio_ready_s > lag:
                return "slow client"
            self._send_started = now
            try:
                await self.socket.send(item.data)
            except (ConnectionError, RuntimeError):
                return "client gone"
            self._send_started = None
            self.metrics.bytes["out"] += len(item.data)

    # ---- client -> engine ---------------------------------------------------------------

    async def _read(self) -> str:
        while True:
            message = await self.socket.receive()
            if message.kind == "closed":
                if message.close_code == WSCloseCode.MESSAGE_TOO_BIG:
                    self.metrics.refused["message"] += 1
                    return "message too big"
                if message.vanished:
                    return "client vanished"
                return "client closed"
            self._last_heard = time.monotonic()
            self.metrics.bytes["in"] += message.size
            # Bounded in bytes as in messages: a voice recording may be 30 s of PCM, and
            # many such messages must not pile up while a new engine is being built.
            while self._inbox_bytes and self._inbox_bytes + message.size > self.limits.inbox_bytes:
                self._inbox_drained.clear()
                await self._inbox_drained.wait()
            self._inbox_bytes += message.size
            await self._inbox.put(message)

    async def _process(self) -> str:
        await self._open_conversation()
        while True:
            message = await self._inbox.get()
            self._inbox_bytes -= message.size
            self._inbox_drained.set()
            # A clone's recording is the one message past the usual limit (voice_clone.py
            # checks its length); the hard limit still holds (aiohttp does not read past it).
            recording = getattr(self.codec, "expects_recording", False)
            limit = (self.limits.hard_message_bytes if recording
                     else self.limits.max_message_bytes)
            if message.size > limit:
                self._refuse(wire.WireError(
                    "message", f"a message of {message.size} bytes is over the limit of "
                               f"{limit} bytes: ignored", self.codec.skip(message)))
                continue
            if self._goodbye is not None:
                continue  # closing: nothing more is read into the conversation
            items = self.codec.decode(message)
            for index, item in enumerate(items):
                if isinstance(item, Frame):
                    # decoded, not yet heard: they are the new conversation's first frames
                    await self._restart_if_asked(
                        unheard=sum(isinstance(i, Frame) for i in items[index:]))
                    await self._push(item)
                elif isinstance(item, wire.WireError):
                    self._refuse(item)
                elif isinstance(item, VoiceRecording):
                    await self._clone(item)
                elif isinstance(item, Goodbye):
                    self.metrics.refused[item.error.stage] += 1
                    self._say_goodbye(item.error.event(), item.code, item.reason)
                    break
                else:
                    await self._apply(item)
            if self._inbox.empty():  # a burst of resets and choices: one new conversation
                await self._restart_if_asked()

    def _refuse(self, error: wire.WireError) -> None:
        self.metrics.refused[error.stage] += 1
        self._emit(error.event())

    async def _push(self, frame: Frame) -> None:
        conversation = self._conversation
        if conversation is None:
            return
        self._talking = True
        # The engine's queue holds 2 s of frames; a client sending faster than the engine
        # steps waits here (and its socket fills), it never loses frames. The frame goes in
        # once there is room: a push refused is a frame dropped (and counted so).
        while not conversation.takes_frame():
            if not conversation.running:
                return
            await asyncio.sleep(_PUSH_WAIT_S)
        conversation.push_frame(frame.pcm)

    async def _apply(self, message: wire.ClientMessage) -> None:
        if isinstance(message, wire.SpanRequest):
            await self._restart_if_asked()  # a span sent after a reset goes to the new one
            self._inject(message)
            return
        if not self.codec.controls:  # moshi's codec lets only spans through
            return
        if isinstance(message, wire.ResetRequest):
            self._ask_restart()
            return
        if isinstance(message, wire.ContextRequest):
            self._set_context(message)
            return
        if self._talking:
            self._refuse(wire.WireError("voice", "the conversation has started: send it before "
                                                 "the first frame, or reset first"))
            return
        assert isinstance(message, wire.VoiceRequest)
        if message.name not in self.host.voices:
            known = ", ".join(self.host.voices) or "none"
            self._refuse(wire.WireError("voice", f"no voice {message.name!r} on "
                                                 f"{self.host.model_id} (voices: {known})"))
            return
        self.choice = replace(self.choice, voice=message.name)
        self._pending_voice = message.name
        self._pending_clone = None
        self._ask_restart()

    def _set_context(self, message: wire.ContextRequest) -> None:
        """The persona and the user's profile. One that starts the same conversation as the
        one waiting changes nothing (the reference's page sends its context after every
        `ready` and on every edit): no restart, no `ready`, no error once talking."""
        persona = message.persona
        if persona and not self.host.takes_persona:
            self._refuse(wire.WireError("persona", f"{self.host.model_id} takes no "
                                                   "persona; the name and city still "
                                                   "reach the LLM side"))
            persona = None  # nothing to start from: it would only look like a change
        choice = replace(self.choice, persona=persona, name=message.name, city=message.city)
        if self._starts_as(choice) == self._starts_as(self.choice):
            self.choice = choice
            return
        if self._talking:
            self._refuse(wire.WireError("persona", "the conversation has started: send it "
                                                   "before the first frame, or reset first"))
            return
        self.choice = choice
        self._ask_restart()

    def _starts_as(self, choice: ConversationChoice) -> EngineOptions:
        """What a conversation of `choice` starts from: equal for two choices that start the
        same one (a persona equal to the default is the default)."""
        return replace(self.host.options_for(choice), role=self.host.persona_for(choice))

    async def _clone(self, recording: VoiceRecording) -> None:
        """A voice from the client's recording (voice_clone.py), for the conversation about
        to begin: it restarts in that voice, and `cloned` says so once it is ready."""
        if not self.host.takes_persona:
            self._refuse(wire.WireError(
                "voice", f"{self.host.model_id} takes no voice: cloning needs a checkpoint "
                         "whose start carries a voice prompt (PersonaPlex, "
                         "context-spanning-7b, tiny-persona, tiny-cs)"))
            return
        if self._talking:
            self._refuse(wire.WireError("voice", "the conversation has started: clone before "
                                                 "the first frame, or reset first"))
            return
        if self._clone_folder is None:
            self._clone_folder = Path(tempfile.mkdtemp(prefix="contextspan-voice-"))
        self._clones += 1
        loop = asyncio.get_running_loop()
        path = await loop.run_in_executor(None, write_recording, recording, self._clone_folder,
                                          self._clones)
        self.choice = replace(self.choice, voice=str(path))
        self._pending_voice = None
        self._pending_clone = prompt_frames(recording)
        self._ask_restart()

    def _inject(self, request: wire.SpanRequest) -> None:
        conversation = self._conversation
        try:
            if conversation is None:
                raise RuntimeError("no conversation is running")
            span_id = conversation.inject(request.text, request.source)
        except (RuntimeError, ValueError) as exc:  # stopped, a full backlog, bad text
            self.metrics.spans["rejected"] += 1
            self._emit(wire.SpanRejected(None, request.source, str(exc), request.id))
            return
        self._emit(wire.SpanQueued(span_id, request.source, request.id))

    # ---- limits ---------------------------------------------------------------------------

    async def _watch(self) -> str:
        limits = self.limits
        while True:
            await asyncio.sleep(_WATCH_EVERY_S)
            now = time.monotonic()
            started = self._send_started
            if started is not None and now - started > limits.max_send_lag_s:
                return "slow client"
            if self._goodbye is not None:
                reason, since = self._goodbye
                if now - since > limits.max_send_lag_s + CLOSE_TIMEOUT_S:
                    return reason  # the goodbye could not be sent: end anyway
                continue
            if not self._warming and now - self._last_heard > limits.idle_timeout_s:
                self._say_goodbye(wire.Error("idle", f"nothing heard from the client for "
                                                     f"{limits.idle_timeout_s:g} s: closing"),
                                  WSCloseCode.OK, "idle")
            elif self._opened is not None and now - self._opened > limits.max_conversation_s:
                self._say_goodbye(wire.Error("limit", f"a conversation lasts at most "
                                                      f"{limits.max_conversation_s:g} s on "
                                                      "this server: closing"),
                                  WSCloseCode.OK, "time limit")
