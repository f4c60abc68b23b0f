"""A live conversation built from the user's settings: checkpoint, engine, ASR, LLM, audio.

No Qt here: the desktop app wraps a session in a QObject that turns the listener's calls
into signals. Loading and running happen on the session's own thread; every call from the
GUI thread returns at once: what it asks is a message in the session's one inbox
(session_messages.py), where the pipeline's events, the LLM probe's verdict and the audio's
failures arrive too; the session's thread handles them in order, so the transcript has one
writer. The model's voice
does not wait on that thread: the pipeline's router hands each frame to the speaker.

Text always works: the audio devices' life (opened as far as they go, lost, reopened by
Resume or by themselves after a stall) is session_audio.py's, and a conversation without
them goes on ("paused").
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any, Protocol

from app.checkpoints.missing import CheckpointMissingError
from app.conversation.assembly import (
    build_backend,
    build_orchestrator,
    build_pipeline,
    build_tools,
)
from app.conversation.audio_source import AudioSource
from app.conversation.config import NONE, ConversationConfig
from app.conversation.events import ConversationEvent
from app.conversation.llm_probe import LlmProbed, probe_in_background, unavailable_notice
from app.conversation.pipeline import ConversationPipeline
from app.conversation.session_audio import SessionAudio
from app.conversation.session_messages import (
    GUI_REQUESTS,
    ApplySettings,
    AudioFailed,
    InjectText,
    ResumeAsked,
    SendText,
    SessionMessage,
    StopAsked,
)
from app.conversation.transcript.builder import TranscriptBuilder, llm_label
from app.conversation.transcript.entries import TranscriptEntry
from app.cuts import Cut, cut_if_longer
from app.engine import events as ev
from app.engine.speech_engine import SpeechEngine
from app.frames import FRAME_S
from app.install_kind import engine_installed, needs_full_install
from app.orchestrator import events as oe
from app.remote import events as remote
from app.remote.events import NetworkStats
from app.remote.link_words import slow_link_notice
from app.settings.schema import AppSettings, LlmSettings

if TYPE_CHECKING:  # the remote engine (aiohttp) loads only for a server's model; the
    # local engine (torch) only for this computer's: the thin client has no torch at all
    from app.checkpoints.loader import LoadedCheckpoint
    from app.conversation.assembly import Device
    from app.engine.row_conversation import RowConversation
    from app.remote.remote_engine import RemoteEngine

log = logging.getLogger(__name__)

MAX_DROPPED_TEXT_CHARS = 20_000  # a dropped file larger than this is cut (its entry says so)
SETTINGS_HOST = "its address in Settings → Assistant (LLM)"  # where the LLM server is given
SPEECH_SERVER_PLACE = "Settings → Speech model → Speech engine"  # … and the speech server
# A server's model: late frames that bring the notice that the link is slow, and how many
# times more bring the next one.
SLOW_LINK_LATE_FRAMES = 5
SLOW_LINK_STEP = 10


@dataclass(frozen=True)
class SessionStatus:
    model: str = ""
    device: str = ""
    dtype: str = ""
    frame_ms: float = 0.0
    budget_ms: float = 80.0
    context_used: int = 0
    context_window: int = 0
    span_positions_in_window: int = 0
    llm_state: str = "off"
    llm_message: str = ""
    mic_db: float = -120.0
    speaker_db: float = -120.0
    dropped_frames: int = 0
    asr_dropped_frames: int = 0  # frames the speech recognizer never heard (it fell behind)
    underruns: int = 0
    overruns: int = 0
    # A speech model on a server (Settings → Speech engine): its address; an audio frame's
    # round trip (median of the last 2 s) in its parts, the network's own round trip and
    # what the frame spends at the server; frames that came back too late to play; the
    # audio's codec and the bytes each way.
    server: str = ""
    connected: bool = True
    frame_rtt_ms: float | None = None
    network_rtt_ms: float | None = None
    server_ms: float | None = None
    late_frames: int = 0
    audio_codec: str = ""
    bytes_sent: int = 0
    bytes_received: int = 0
    # The tools offered to the LLM now, by the names it is given: the built-in ones that
    # could be built and the ready MCP servers' (the settings' list is what was asked for).
    tools: tuple[str, ...] = ()


class SessionListener(Protocol):
    # loading / running / paused (audio off, text on) / stopped / error / model_missing
    def on_state(self, state: str, detail: str) -> None: ...
    def on_entry(self, entry: TranscriptEntry) -> None: ...
    def on_status(self, status: SessionStatus) -> None: ...


class CheckpointCache:
    """Keeps the last loaded checkpoint, so a stop and a start do not reload 16 GB."""

    def __init__(self) -> None:
        self._key: tuple[str, ...] | None = None
        self._checkpoint: LoadedCheckpoint | None = None
        self._lock = threading.Lock()

    def get(self, key: tuple[str, ...], load: Callable[[], LoadedCheckpoint]) -> LoadedCheckpoint:
        with self._lock:
            if self._key != key or self._checkpoint is None:
                self._checkpoint = None  # free the old one before loading the next
                self._checkpoint = load()
                self._key = key
            return self._checkpoint


# What needs a new conversation to change: (group, field, how the user calls it). The rest
# (the LLM side, tools, mute, echo mode, voice levelling) applies while a conversation runs.
_RESTART_FIELDS = (
    ("speech", "model_id", "the speech model"),
    ("speech", "custom_folder", "the speech model's folder"),
    ("speech", "device", "the device"),
    ("speech", "precision", "the precision"),
    ("speech", "voice", "the voice"),
    ("speech", "role", "the persona"),
    ("speech", "user_name", "your name"),
    ("speech", "user_city", "your city"),
    ("audio", "input_device", "the microphone"),
    ("audio", "output_device", "the speaker"),
    ("llm", "stt_model", "speech recognition"),
    ("llm", "end_of_turn", "end-of-turn detection"),
    ("engine", "mode", "where the speech model runs"),
    ("engine", "server_url", "the speech server"),
    ("engine", "server_token", "the speech server's token"),
    ("engine", "asr_on_server", "where speech recognition runs"),
)
# The LLM side's other settings apply live: the backend and the tools are built anew from
# the settings (`_reconfigure_llm`), so a new LLM setting needs no line here.
_LIVE_LLM_FIELDS = tuple(f.name for f in fields(LlmSettings)
                         if ("llm", f.name) not in {(g, n) for g, n, _ in _RESTART_FIELDS})


def restart_needed(old: AppSettings, new: AppSettings) -> tuple[str, ...]:
    """What changed from `old` to `new` that applies only after a restart of the
    conversation, in words ("the speech model", "the microphone", ...)."""
    changed = [label for group, name, label in _RESTART_FIELDS
               if getattr(getattr(old, group), name) != getattr(getattr(new, group), name)]
    # Speech recognition is built with the LLM side: turning the LLM on brings it only then.
    if (old.llm.backend == "none" and new.llm.backend != "none"
            and new.llm.stt_model != "none" and "speech recognition" not in changed):
        changed.append("speech recognition")
    return tuple(changed)


def _llm_changed(old: LlmSettings, new: LlmSettings) -> bool:
    return any(getattr(old, name) != getattr(new, name) for name in _LIVE_LLM_FIELDS)


class ConversationSession:
    def __init__(
        self,
        settings: AppSettings,
        listener: SessionListener,
        audio_factory: Callable[[AppSettings], AudioSource],
        cache: CheckpointCache | None = None,
        status_interval_s: float = 0.2,
    ) -> None:
        self.settings = settings  # what the conversation runs with (changed on its thread)
        self._started_with = settings  # what only a restart changes is still from these
        self._listener = listener
        self._cache = cache or CheckpointCache()
        self._status_interval_s = status_interval_s
        self._builder = TranscriptBuilder(
            llm=llm_label(settings.llm.backend, settings.llm.model)
            if settings.llm.backend != "none" else "")
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pipeline: ConversationPipeline | None = None
        # The engine once it is up; a RemoteEngine (app/remote) for a server's model.
        self._engine: SpeechEngine[ConversationEvent] | None = None
        self._remote: RemoteEngine | None = None  # the engine, when it is a server's
        self._late_said_at = SLOW_LINK_LATE_FRAMES  # late frames that bring the next notice
        self._remote_down = False  # the server's connection dropped: paused until it is back
        # The audio devices (opened once the engine is up; their failures come to the inbox).
        self._audio = SessionAudio(lambda: audio_factory(self.settings),
                                   lambda message: self._inbox.put(AudioFailed(message)),
                                   self._notice, listener.on_state)
        self._status = SessionStatus()
        # The one inbox (session_messages.py): the GUI thread's requests, the pipeline's
        # events, the LLM probe's verdicts, the audio's failures, resume and stop.
        self._inbox: queue.SimpleQueue[SessionMessage] = queue.SimpleQueue()
        # Taken from the inbox before the engine was up: handled once it is, in order.
        self._deferred: list[SessionMessage] = []
        self._handlers: dict[type, Callable[[Any], None]] = {
            ApplySettings: self._on_apply_settings, SendText: self._on_send_text,
            InjectText: self._on_inject_text,
        }
        self._probing: object | None = None  # the backend the latest probe asks

    # ---- GUI thread (returns at once) -------------------------------------------------

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("a session runs once; make a new one to start again")
        self._thread = threading.Thread(target=self._run, name="conversation", daemon=True)
        self._thread.start()

    def request_stop(self) -> None:
        """Ask the session to wind down on its own thread; returns at once."""
        self._stop.set()
        self._inbox.put(StopAsked())  # the session's wait ends at once
        pipeline = self._pipeline
        if pipeline is not None and pipeline.orchestrator is not None:
            pipeline.orchestrator.cancel_pending("the conversation stopped")

    def stop(self, timeout: float = 15.0) -> bool:
        self.request_stop()
        return self.join(timeout)

    def join(self, timeout: float) -> bool:
        """Wait (bounded) for the session's thread; True when it has ended."""
        if self._thread is None:
            return True
        self._thread.join(max(0.0, timeout))
        return not self._thread.is_alive()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def paused(self) -> bool:
        """The audio devices are not (all) in use: Resume tries them again."""
        return self._audio.paused or self._remote_down

    def resume(self) -> None:
        """After an audio device problem: open the devices again, same conversation; after
        a dropped connection to the speech server: try it again now."""
        self._inbox.put(ResumeAsked())

    def set_muted(self, muted: bool) -> None:
        self._audio.set_muted(muted)

    def cancel_pending_turn(self) -> None:
        """Esc / Cancel: drop the LLM request in flight (a TurnCancelled event says so)."""
        pipeline = self._pipeline
        if pipeline is not None and pipeline.orchestrator is not None:
            pipeline.orchestrator.cancel_pending()

    def apply_settings(self, settings: AppSettings) -> tuple[str, ...]:
        """Apply at once what can be (the LLM side, tools, echo mode, voice levelling; mute
        is `set_muted`); returns what applies only after a restart, in words."""
        needs_restart = restart_needed(self._started_with, settings)
        self._inbox.put(ApplySettings(settings))  # before what is typed after it
        return needs_restart

    def send_text(self, text: str) -> None:
        """A typed question: shown as the user's, and asked to the LLM."""
        text = text.strip()
        if text:
            self._inbox.put(SendText(text))

    def inject_text(self, text: str, source: str) -> None:
        """'Read this': text the user pasted or dropped goes in as a span, as-is."""
        self._inbox.put(InjectText(text, source))

    # ---- session thread: the GUI thread's requests, one handler each --------------------

    def _run_deferred(self, requests_only: bool) -> None:
        """What arrived while the engine loaded, in order (a question typed after new
        settings goes to the new LLM). `requests_only`: the GUI's requests now, the rest
        (resume, an audio failure) once the audio runs."""
        kept: list[SessionMessage] = []
        for message in self._deferred:
            if requests_only and not isinstance(message, GUI_REQUESTS):
                kept.append(message)
            else:
                self._dispatch(message)
        self._deferred = kept

    def _on_apply_settings(self, message: ApplySettings) -> None:
        self._apply(message.settings)

    def _on_send_text(self, message: SendText) -> None:
        for entry in self._builder.typed(message.text):
            self._listener.on_entry(entry)
        self._typed(message.text)

    def _on_inject_text(self, message: InjectText) -> None:
        text, cut = cut_if_longer("the text", message.text, MAX_DROPPED_TEXT_CHARS,
                                  f"a dropped or pasted text is read up to "
                                  f"{MAX_DROPPED_TEXT_CHARS:,} characters")
        self._inject(text, message.source, (cut,) if cut is not None else ())

    # ---- session thread ---------------------------------------------------------------

    def _typed(self, text: str) -> None:
        pipeline = self._pipeline
        orchestrator = pipeline.orchestrator if pipeline is not None else None
        if orchestrator is not None:
            orchestrator.on_typed_text(text)
        else:
            self._listener.on_entry(self._builder.notice(
                "No LLM backend is set up: typed text was not sent anywhere. Choose one in "
                "Settings, or drop the text in to have it read.", "warning"))

    def _inject(self, text: str, source: str, cuts: tuple[Cut, ...] = ()) -> None:
        """The span's entry is shown at once (queued), whatever becomes of it."""
        engine = self._engine
        if engine is None:
            return
        try:
            span_id = engine.inject(text, source)
        except RuntimeError as exc:
            self._listener.on_entry(self._builder.span_not_injected(text, source, str(exc),
                                                                    cuts))
            return
        for entry in self._builder.remember_span(span_id, text, source, cuts):
            self._listener.on_entry(entry)

    def _notice(self, message: str, severity: str = "warning") -> None:
        self._listener.on_entry(self._builder.notice(message, severity))

    def _load(self, config: ConversationConfig) -> LoadedCheckpoint:
        from app.conversation.assembly import load_speech_model

        return load_speech_model(config, cache=self._cache,
                                 on_loading=lambda what: self._listener.on_state("loading", what))

    def _local_engine(self, config: ConversationConfig) -> tuple[RowConversation, Device] | None:
        """The speech model on this computer, loaded (None: stopped meanwhile). torch is
        imported here and only here: the thin client's install has none, and says so."""
        if not engine_installed():
            raise RuntimeError(needs_full_install("The speech model on this computer") + (
                "; or run it on a server: Settings → Speech model → Speech engine"))
        from app.conversation.assembly import build_engine, engine_options

        checkpoint = self._load(config)
        if self._stop.is_set():
            return None
        self._listener.on_state("loading", "Warming up the speech model…")
        return build_engine(checkpoint, engine_options(config)), checkpoint.device

    def _recogniser_device(self, config: ConversationConfig) -> tuple[ConversationConfig,
                                                                      Device]:
        """With the speech model on a server: where a recogniser on this computer runs
        (none: "cpu", unused). One asked for in an install without the engine is a notice,
        and the conversation goes on without it."""
        if not config.has_stt or config.stt_on_server:
            return config, "cpu"
        if not engine_installed():
            self._notice(needs_full_install("Speech recognition on this computer") + (
                ". Until then typed questions still reach the LLM; or let the server "
                "recognise your words: Settings → Speech model → Speech engine → "
                "\"Speech recognition on the server\"."), "warning")
            return replace(config, stt_model=NONE), "cpu"
        from app.engine.device import choose_device

        return config, choose_device(config.device)

    def _run(self) -> None:
        # The final state is announced only after every stage has shut down, so that a
        # new session (sharing the cached checkpoint) never starts beside a dying one.
        final = ("stopped", "Stopped")
        try:
            config = ConversationConfig.from_settings(self.settings)
            engine: SpeechEngine[ConversationEvent]
            device: Device
            if config.server is not None:
                remote = self._connect_remote(config)
                if remote is None:  # stopped while connecting
                    return
                engine = self._remote = remote
                config, device = self._recogniser_device(config)
            else:
                local = self._local_engine(config)
                if local is None:
                    return
                engine, device = local
            # What cannot be had (the recogniser, the tools) is a notice, not a failure.
            pipeline = build_pipeline(engine, config, device, notice=self._notice, live=True,
                                      host_flag=SETTINGS_HOST)
            orchestrator = pipeline.orchestrator
            self._pipeline = pipeline
            pipeline.set_audio_sink(self._audio.play)  # the voice never waits on this thread
            pipeline.send_events_to(self._inbox.put)  # its router posts into the inbox
            pipeline.start()
            self._wait_ready()
            self._engine = engine
            self._run_deferred(requests_only=True)  # asked while the engine loaded, in order
            self._status = self._first_status(engine, orchestrator is not None)
            if orchestrator is not None:  # is the LLM there? said before the first question
                self._probe_llm(config)
            self._audio.start(lambda frame: pipeline.push_frame(frame, 0.0))
            self._pump(pipeline)
        except CheckpointMissingError as exc:  # not a failure: the app offers the download
            log.info("the speech model is not on disk: %s", exc)
            final = ("model_missing", str(exc))
        except Exception as exc:  # shown in the window; the app stays up
            # The window and the terminal get the words; the class and traceback, the log.
            reason = str(exc) or type(exc).__name__
            log.exception("conversation failed: %s", reason)
            final = ("error", reason)
        finally:
            self._keep_unsent()
            self._shutdown()
            self._listener.on_state(*final)

    def _keep_unsent(self) -> None:
        """What was typed or dropped but never reached the conversation (the model did not
        load, or it stopped first) is shown, with why, not lost."""
        unsent = False
        left, self._deferred = self._deferred, []
        while True:
            try:
                left.append(self._inbox.get_nowait())
            except queue.Empty:
                break
        for message in left:
            if isinstance(message, SendText):
                for entry in self._builder.typed(message.text):
                    self._listener.on_entry(entry)
                unsent = True
            elif isinstance(message, InjectText):
                self._listener.on_entry(self._builder.span_not_injected(
                    message.text, message.source, "the conversation did not start or had "
                    "stopped"))
        if unsent:
            self._notice("What you typed above was not sent: the conversation did not start "
                         "or had stopped. Start again to ask it.", "warning")

    def _connect_remote(self, config: ConversationConfig) -> RemoteEngine | None:
        """The speech model on a server: connected and its `ready` heard, or None when the
        conversation was stopped meanwhile. Raises RemoteEngineError with the reason."""
        from app.conversation.assembly import connect_remote

        assert config.server is not None
        self._listener.on_state("loading", f"Connecting to the speech server at "
                                           f"{config.server.url}…")
        return connect_remote(config, self.settings.engine.connect_timeout_s,
                              cancel=self._stop, where=SPEECH_SERVER_PLACE)

    def _first_status(self, engine: SpeechEngine[ConversationEvent], llm_on: bool
                      ) -> SessionStatus:
        llm_state = "idle" if llm_on else "off"
        facts = engine.facts()
        remote = self._remote is not None
        return SessionStatus(model=facts.display_name, device=facts.device,
                             dtype=facts.dtype, context_window=facts.context_window,
                             llm_state=llm_state,
                             server=self.settings.engine.server_url.strip() if remote else "")

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + 600.0  # a 7B warm-up on a slow GPU, generously
        while not self._stop.is_set() and time.monotonic() < deadline:
            message = self._next(min(1.0, max(0.0, deadline - time.monotonic())))
            if isinstance(message, ev.EngineReady):
                return
            if isinstance(message, ev.EngineError):
                raise RuntimeError(message.message)
            if isinstance(message, (*GUI_REQUESTS, ResumeAsked, AudioFailed, LlmProbed)):
                self._deferred.append(message)  # once the engine is up (no probe asks before)
            elif message is not None and not isinstance(message, StopAsked):
                self._handle(message)
        if not self._stop.is_set():
            raise TimeoutError("the speech model did not get ready within 10 minutes")

    def _next(self, timeout: float) -> SessionMessage | None:
        """The inbox's next message, or None after `timeout` seconds."""
        try:
            return self._inbox.get(timeout=timeout)
        except queue.Empty:
            return None

    # ---- settings changed during the conversation ---------------------------------------

    def _apply(self, settings: AppSettings) -> None:
        old, self.settings = self.settings, settings
        pipeline = self._pipeline
        if pipeline is None:
            return
        if settings.audio.level_voice != old.audio.level_voice:
            pipeline.set_level_voice(settings.audio.level_voice)
        if settings.audio.echo_mode != old.audio.echo_mode:
            self._audio.set_echo_mode(settings.audio.echo_mode)
        if _llm_changed(old.llm, settings.llm) or old.mcp != settings.mcp:  # tool servers too
            self._reconfigure_llm(pipeline, settings)

    def _reconfigure_llm(self, pipeline: ConversationPipeline, settings: AppSettings) -> None:
        """The LLM side from the new settings: the running orchestrator keeps the
        conversation so far and asks the new backend from its next turn on."""
        llm = settings.llm
        if llm.backend == "none":
            pipeline.set_orchestrator(None)
            self._status = _with(self._status, llm_state="off", llm_message="")
            self._notice("The assistant (LLM) is off now.", "info")
            return
        config = ConversationConfig.from_settings(settings)
        try:
            backend = build_backend(config, SETTINGS_HOST)
        except ValueError as exc:  # the conversation goes on with the LLM side it had
            self._notice(f"The assistant keeps its previous settings: {exc}", "warning")
            return
        tools = build_tools(config, self._notice)
        self._builder.set_llm(llm_label(llm.backend, llm.model))
        orchestrator = pipeline.orchestrator
        if orchestrator is None:
            engine = self._engine
            if engine is None:
                return
            pipeline.set_orchestrator(build_orchestrator(config, engine, backend, tools))
        else:
            orchestrator.reconfigure(backend, tools)
        self._status = _with(self._status, llm_state="idle", llm_message="")
        self._probe_llm(config)
        model = f" {llm.model}" if llm.model else ""
        offered = tools.names()  # what the LLM is given: built, and the MCP servers' ready
        with_tools = f", with tools: {', '.join(offered)}" if offered else ", without tools"
        self._notice(f"The assistant now asks {backend.name}{model} at {llm.host}"
                     f"{with_tools}.", "info")
        self._status = _with(self._status, tools=tuple(offered))

    # ---- is the LLM there? ----------------------------------------------------------------

    def _probe_llm(self, config: ConversationConfig) -> None:
        """Ask the LLM server whether it is there, with a backend of the probe's own (one
        backend serves one call at a time: the conversation's may be answering already)."""
        try:
            backend = build_backend(config, SETTINGS_HOST)
        except ValueError:
            return  # said when the conversation's own backend was built
        self._probing = backend
        probe_in_background(backend, self.settings.llm.host, self._inbox.put)

    def _take_probe(self, probed: LlmProbed) -> None:
        """The probe's verdict, applied on this thread; stale once the backend changed."""
        pipeline = self._pipeline
        orchestrator = pipeline.orchestrator if pipeline is not None else None
        if orchestrator is None or probed.backend is not self._probing:
            return  # the LLM was changed or turned off since
        if self._status.llm_state not in ("idle", "off"):  # a question went meanwhile
            return
        self._status = _with(self._status, llm_state=probed.state,
                             llm_message=probed.message)
        self._listener.on_status(self._status)
        if probed.state != "idle":
            self._notice(unavailable_notice(probed), "warning")

    # ---- the event loop -----------------------------------------------------------------

    def _dispatch(self, message: SessionMessage) -> None:
        """One message of the inbox, on the session's thread (the engine is up)."""
        if isinstance(message, GUI_REQUESTS):
            self._handlers[type(message)](message)
        elif isinstance(message, LlmProbed):
            self._take_probe(message)
        elif isinstance(message, AudioFailed):
            self._audio.lose()  # unless it was handled already
        elif isinstance(message, ResumeAsked):
            self._audio.resume()  # by hand, now
            if self._remote_down and self._remote is not None:
                self._remote.reconnect_now()
        elif not isinstance(message, StopAsked):
            self._handle(message)  # an event of the pipeline

    def _pump(self, pipeline: ConversationPipeline) -> None:
        self._run_deferred(requests_only=False)  # a resume asked while it loaded, say
        next_status = 0.0  # the status bar's first figures at once
        failure: str | None = None  # the engine's fatal error, if it sends one
        while not self._stop.is_set():
            resume_at = self._audio.resume_at
            due = [next_status] + ([resume_at] if resume_at else [])
            wait = max(0.0, min(due) - time.monotonic())
            message = self._next(min(wait, self._status_interval_s))
            if isinstance(message, ev.EngineError) and message.fatal:
                failure = message.message  # the window's last words say why
            if isinstance(message, ev.EngineStopped):
                if message.reason == "error":
                    raise RuntimeError(f"The speech engine stopped: {failure}" if failure
                                       else "The speech engine stopped after an error")
                return
            if message is not None:
                self._dispatch(message)
            resume_at = self._audio.resume_at
            if resume_at is not None and time.monotonic() >= resume_at:
                self._audio.resume_after_stall()
            audio = self._audio.source
            now = time.monotonic()
            if now < next_status:
                continue
            next_status = now + self._status_interval_s
            if audio is not None:
                mic, speaker = audio.levels()
                counters = audio.counters()
                self._status = _with(self._status, mic_db=mic, speaker_db=speaker,
                                     dropped_frames=counters.get("dropped", 0)
                                     + self._engine_dropped(),
                                     asr_dropped_frames=self._asr_dropped(),
                                     underruns=counters.get("underruns", 0),
                                     overruns=counters.get("overruns", 0))
                if self._remote is not None:  # a server's model
                    self._network_status(self._remote.network_stats())
                self._status = _with(self._status, tools=self._offered_tools(pipeline))
                self._listener.on_status(self._status)

    def _network_status(self, stats: NetworkStats) -> None:
        """The link's figures into the status; a notice when frames start coming back too
        late to play (at 5 late frames, then 50, 500: the status bar counts the rest)."""
        self._status = _with(self._status, connected=stats.connected,
                             frame_rtt_ms=stats.frame_rtt_ms,
                             network_rtt_ms=stats.network_rtt_ms, server_ms=stats.server_ms,
                             late_frames=stats.late_frames, audio_codec=stats.audio_codec,
                             bytes_sent=stats.bytes_sent, bytes_received=stats.bytes_received)
        if stats.late_frames < self._late_said_at:
            return
        while self._late_said_at <= stats.late_frames:
            self._late_said_at *= SLOW_LINK_STEP
        self._notice(slow_link_notice(stats), "warning")

    @staticmethod
    def _offered_tools(pipeline: ConversationPipeline) -> tuple[str, ...]:
        orchestrator = pipeline.orchestrator
        return tuple(orchestrator.tools.names()) if orchestrator is not None else ()

    def _engine_dropped(self) -> int:
        pipeline = self._pipeline
        return pipeline.dropped_frames if pipeline is not None else 0

    def _asr_dropped(self) -> int:
        pipeline = self._pipeline
        return pipeline.asr_dropped_frames if pipeline is not None else 0

    def _handle(self, event: ConversationEvent) -> None:
        if isinstance(event, (remote.ConnectionLost, remote.ReconnectFailed,
                              remote.Reconnected)):
            self._connection_changed(event)
            return
        if isinstance(event, (remote.LinkStalled, remote.LinkResumed)):
            self._link_stalled(event)
            return
        if isinstance(event, ev.FrameStats):
            self._status = _with(self._status, frame_ms=event.frame_ms,
                                 context_used=event.context.used,
                                 span_positions_in_window=event.context.span_positions_in_window)
        elif isinstance(event, oe.LlmStatus):
            self._status = _with(self._status, llm_state=event.state, llm_message=event.message)
        for entry in self._builder.entries_for(event):
            self._listener.on_entry(entry)

    def _link_stalled(self, event: remote.LinkStalled | remote.LinkResumed) -> None:
        """The network to the speech server stalls, or is back: the conversation is kept
        and waited for, and the user told what the stall cost, if anything."""
        if isinstance(event, remote.LinkStalled):
            self._notice(
                f"Nothing has come from the speech server for {event.silent_s:g} s: the "
                "network is stalling. The conversation is kept and waits for it (what you "
                "say meanwhile may not reach the model); it reconnects on its own if "
                f"nothing comes within {event.gives_up_s:g} s.", "warning")
            self._listener.on_state("running", "Speech server not heard: waiting for the "
                                               "network (reconnecting if it does not come "
                                               "back)")
            return
        lost = event.frames_not_sent
        cost = ("nothing went missing" if lost == 0 else
                f"{lost * FRAME_S:.1f} s of what you said ({lost} audio frames) could not "
                "be sent in time: the model did not hear it, say it again if it mattered")
        self._notice(f"The speech server is back after a {event.stalled_s:g} s stall; the "
                     f"conversation goes on where it was, and {cost}.",
                     "info" if lost == 0 else "warning")
        if not self._audio.missing:
            self._listener.on_state("running", "Listening")

    def _connection_changed(self, event: remote.ConnectionLost | remote.ReconnectFailed
                            | remote.Reconnected) -> None:
        """The speech server's connection dropped, an attempt failed, or it is back."""
        if isinstance(event, remote.ConnectionLost):
            self._remote_down = True
            for entry in self._builder.context_lost("the speech server's conversation ended "
                                                    "with the connection"):
                self._listener.on_entry(entry)
            self._notice(
                f"The connection to the speech server was lost ({event.reason}). The "
                "conversation is paused and reconnects on its own (Resume tries at once). The "
                "speech model's context is lost with it: once back, the model starts afresh "
                "and no longer knows what was said or read before; this transcript keeps it.",
                "error")
            self._listener.on_state("paused", "Speech server lost: reconnecting (Resume "
                                              "tries now)")
        elif isinstance(event, remote.ReconnectFailed):
            if self._remote_down:
                self._listener.on_state("paused", f"Not reconnected: {event.reason}; next "
                                                  f"try in {event.retry_in_s:g} s (Resume "
                                                  "tries now)")
        else:
            assert isinstance(event, remote.Reconnected)
            self._remote_down = False
            self._notice(
                "Reconnected to the speech server. This is a new conversation for the speech "
                "model: what was said and read before the drop is not in its context any more "
                "(a span's context menu, Send again, reads it to the model again).", "warning")
            if self._audio.missing:
                self._listener.on_state("paused", "Reconnected; the audio devices are still "
                                                  "missing (Resume tries again)")
            else:
                self._listener.on_state("running", "Listening")

    def _shutdown(self) -> None:
        self._audio.stop()
        if self._pipeline is not None:
            self._pipeline.stop()
        self._engine = self._remote = None


def _with(status: SessionStatus, **changes: Any) -> SessionStatus:
    return replace(status, **changes)
