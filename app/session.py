"""A live conversation built from the user's settings: checkpoint, engine, ASR, LLM, audio.

No Qt here: the desktop app wraps a session in a QObject that turns the listener's calls
into signals. Loading and running happen on the session's own thread; every call from the
GUI thread returns at once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from app.checkpoints.catalog import get_manifest
from app.checkpoints.loader import LoadedCheckpoint, ensure_built, load_checkpoint, parse_dtype
from app.engine import events as ev
from app.engine.device import choose_device
from app.engine.duplex_engine import DuplexEngine, EngineOptions
from app.orchestrator import events as oe
from app.pipeline import ConversationPipeline
from app.settings.schema import AppSettings
from app.transcript_builder import TranscriptBuilder
from app.ui.transcript_entries import TranscriptEntry

log = logging.getLogger(__name__)

MAX_DROPPED_TEXT_CHARS = 20_000  # a dropped file larger than this is cut, with a notice


class AudioSource(Protocol):
    muted: bool

    def start(self, on_frame: Callable[[np.ndarray], object]) -> None: ...
    def play(self, frame: np.ndarray) -> None: ...
    def levels(self) -> tuple[float, float]: ...
    def counters(self) -> dict[str, int]: ...
    def stop(self, timeout: float = 5.0) -> bool: ...


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
    underruns: int = 0
    overruns: int = 0


class SessionListener(Protocol):
    def on_state(self, state: str, detail: str) -> None: ...  # loading/running/stopped/error
    def on_entry(self, entry: TranscriptEntry) -> None: ...
    def on_status(self, status: SessionStatus) -> None: ...


class CheckpointCache:
    """Keeps the last loaded checkpoint, so a stop and a start do not reload 16 GB."""

    def __init__(self) -> None:
        self._key: tuple | None = None
        self._checkpoint: LoadedCheckpoint | None = None
        self._lock = threading.Lock()

    def get(self, key: tuple, load: Callable[[], LoadedCheckpoint]) -> LoadedCheckpoint:
        with self._lock:
            if self._key != key or self._checkpoint is None:
                self._checkpoint = None  # free the old one before loading the next
                self._checkpoint = load()
                self._key = key
            return self._checkpoint


def _build_llm_side(settings: AppSettings, engine: DuplexEngine, device, notice):
    """ASR and orchestrator from settings; what cannot be had is a notice, not a failure."""
    llm = settings.llm
    if llm.backend == "none":
        return None, None
    from app.orchestrator.orchestrator import Orchestrator, OrchestratorOptions
    from app.tools.default_tools import ToolSettings, build_tools

    if llm.backend == "ollama":
        from app.llm.ollama_backend import OllamaBackend, OllamaSettings

        backend = OllamaBackend(OllamaSettings(host=llm.host, model=llm.model or
                                               OllamaSettings().model, timeout_s=llm.timeout_s))
    else:
        from app.llm.openai_compat_backend import OpenAICompatBackend, OpenAICompatSettings

        backend = OpenAICompatBackend(OpenAICompatSettings(base_url=llm.host, model=llm.model,
                                                           timeout_s=llm.timeout_s))
    enabled = tuple(llm.tools) if llm.tools_enabled else ()
    try:
        tools = build_tools(ToolSettings(enabled=enabled, local_folders=llm.search_folders))
    except ValueError as exc:
        notice(f"Tools are off: {exc}", "warning")
        tools = build_tools(ToolSettings(enabled=()))
    from app.orchestrator.retrieval import user_profile

    speech = settings.speech
    options = OrchestratorOptions(max_span_chars=engine.span_tokenizer.max_tokens * 3,
                                  retrieval=engine.checkpoint.manifest.retrieval,
                                  profile=user_profile(speech.user_name, speech.user_city))
    orchestrator = Orchestrator(backend, tools, engine, options)
    asr = None
    if llm.stt_model == "none":
        return None, orchestrator
    try:
        from app.asr.asr_thread import AsrOptions, StreamingAsr
        from app.asr.stt_catalog import ensure_stt_built, get_stt_manifest, load_stt

        manifest = get_stt_manifest(llm.stt_model)
        asr = StreamingAsr(load_stt(manifest, ensure_stt_built(manifest), device),
                           AsrOptions(force_vad=llm.end_of_turn == "vad"))
    except Exception as exc:  # speech recognition is optional: typing still reaches the LLM
        notice(f"Speech recognition is off ({exc}); typed questions still reach the LLM.",
               "warning")
    return asr, orchestrator


class ConversationSession:
    def __init__(
        self,
        settings: AppSettings,
        listener: SessionListener,
        audio_factory: Callable[[AppSettings], AudioSource],
        cache: CheckpointCache | None = None,
        status_interval_s: float = 0.2,
    ) -> None:
        self.settings = settings
        self._listener = listener
        self._audio_factory = audio_factory
        self._cache = cache or CheckpointCache()
        self._status_interval_s = status_interval_s
        self._builder = TranscriptBuilder()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pipeline: ConversationPipeline | None = None
        self._engine: DuplexEngine | None = None
        self._audio: AudioSource | None = None
        self._status = SessionStatus()
        self._muted = False
        self._pending: list[Callable[[], None]] = []  # texts sent before the engine is up
        self._lock = threading.Lock()
        self._audio_error: str | None = None  # set from the audio's error callback
        self._resume = threading.Event()

    # ---- GUI thread (returns at once) -------------------------------------------------

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("a session runs once; make a new one to start again")
        self._thread = threading.Thread(target=self._run, name="conversation", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 15.0) -> bool:
        self._stop.set()
        if self._thread is None:
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def paused(self) -> bool:
        return self._audio_error is not None

    def resume(self) -> None:
        """After an audio device problem: open the devices again, same conversation."""
        self._resume.set()

    def set_muted(self, muted: bool) -> None:
        self._muted = muted
        if self._audio is not None:
            self._audio.muted = muted

    def send_text(self, text: str) -> None:
        """A typed question: shown as the user's, and asked to the LLM."""
        text = text.strip()
        if not text:
            return
        for entry in self._builder.typed(text):
            self._listener.on_entry(entry)
        self._when_running(lambda: self._typed(text))

    def inject_text(self, text: str, source: str) -> None:
        """'Read this': text the user pasted or dropped goes in as a span, as-is."""
        if len(text) > MAX_DROPPED_TEXT_CHARS:
            self._listener.on_entry(self._builder.notice(
                f"{source}: only the first {MAX_DROPPED_TEXT_CHARS} characters are read",
                "warning"))
            text = text[:MAX_DROPPED_TEXT_CHARS]
        self._when_running(lambda: self._inject(text, source))

    # ---- session thread ---------------------------------------------------------------

    def _when_running(self, action: Callable[[], None]) -> None:
        with self._lock:
            if self._engine is None:
                self._pending.append(action)
                return
        action()

    def _typed(self, text: str) -> None:
        pipeline = self._pipeline
        if pipeline is not None and pipeline.orchestrator is not None:
            pipeline.orchestrator.on_typed_text(text)
        else:
            self._listener.on_entry(self._builder.notice(
                "No LLM backend is set up: typed text was not sent anywhere. Choose one in "
                "Settings, or drop the text in to have it read.", "warning"))

    def _inject(self, text: str, source: str) -> None:
        engine = self._engine
        if engine is None:
            return
        try:
            span_id = engine.inject(text, source)
        except RuntimeError as exc:
            self._listener.on_entry(self._builder.notice(str(exc), "warning"))
            return
        self._builder.remember_span(span_id, text, source)

    def _notice(self, message: str, severity: str = "warning") -> None:
        self._listener.on_entry(self._builder.notice(message, severity))

    def _load(self) -> LoadedCheckpoint:
        speech = self.settings.speech
        manifest = get_manifest(speech.model_id)
        folder = Path(speech.custom_folder) if speech.custom_folder else None
        device = choose_device(speech.device)
        dtype = None if speech.dtype == "auto" else parse_dtype(speech.dtype)
        key = (manifest.id, str(folder), str(device), str(dtype))

        def load() -> LoadedCheckpoint:
            self._listener.on_state("loading", f"Loading {manifest.display_name} on {device}…")
            return load_checkpoint(manifest, ensure_built(manifest, folder), device, dtype)

        return self._cache.get(key, load)

    def _run(self) -> None:
        # The final state is announced only after every stage has shut down, so that a
        # new session (sharing the cached checkpoint) never starts beside a dying one.
        final = ("stopped", "Stopped")
        try:
            checkpoint = self._load()
            if self._stop.is_set():
                return
            self._listener.on_state("loading", "Warming up the speech model…")
            speech = self.settings.speech
            engine = DuplexEngine(checkpoint, EngineOptions(
                voice=speech.voice, role=speech.role, user_name=speech.user_name,
                user_city=speech.user_city))
            asr, orchestrator = _build_llm_side(self.settings, engine, checkpoint.device,
                                                self._notice)
            pipeline = ConversationPipeline(engine, asr, orchestrator,
                                            leveller=self.settings.audio.level_voice)
            audio = self._open_audio()
            self._pipeline, self._audio = pipeline, audio
            pipeline.start()
            self._wait_ready(pipeline)
            with self._lock:
                self._engine = engine
                pending, self._pending = self._pending, []
            for action in pending:
                action()
            if audio.start(lambda frame: pipeline.push_frame(frame, 0.0)) is False:
                self._audio_error = self._audio_error or "the audio device could not be opened"
            for warning in getattr(audio, "warnings", ()):  # e.g. a saved device is gone
                self._notice(str(warning), "warning")
            self._status = SessionStatus(model=checkpoint.manifest.display_name,
                                         device=str(checkpoint.device),
                                         dtype=str(checkpoint.dtype).removeprefix("torch."),
                                         context_window=engine.context_window,
                                         llm_state="idle" if orchestrator else "off")
            self._listener.on_state("running", "Listening")
            self._pump(pipeline, audio)
        except Exception as exc:  # shown in the window; the app stays up
            log.exception("conversation failed")
            final = ("error", f"{type(exc).__name__}: {exc}")
        finally:
            self._shutdown()
            self._listener.on_state(*final)

    def _wait_ready(self, pipeline: ConversationPipeline) -> None:
        deadline = time.monotonic() + 600.0  # a 7B warm-up on a slow GPU, generously
        while not self._stop.is_set() and time.monotonic() < deadline:
            event = self._next(pipeline, 0.1)
            if isinstance(event, ev.EngineReady):
                return
            if isinstance(event, ev.EngineError):
                raise RuntimeError(event.message)
            if event is not None:
                self._handle(event)
        if not self._stop.is_set():
            raise TimeoutError("the speech model did not get ready within 10 minutes")

    @staticmethod
    def _next(pipeline: ConversationPipeline, timeout: float):
        import queue

        try:
            return pipeline.events.get(timeout=timeout)
        except queue.Empty:
            return None

    def _open_audio(self) -> AudioSource:
        audio = self._audio_factory(self.settings)
        audio.muted = self._muted
        if hasattr(audio, "on_error"):  # live devices report unplugging and stream failures
            audio.on_error = self._on_audio_error
        return audio

    def _on_audio_error(self, message: str) -> None:
        self._audio_error = message

    def _pause_for_audio(self, pipeline: ConversationPipeline) -> AudioSource | None:
        """Pause (the model keeps its context) until the user resumes or stops."""
        message = self._audio_error or "audio device problem"
        if self._audio is not None:
            self._audio.stop()
        self._listener.on_entry(self._builder.notice(
            f"Audio stopped: {message}. The conversation is paused; check the device, "
            "then press Resume.", "error"))
        self._listener.on_state("paused", f"Paused: {message}")
        self._resume.clear()
        while not self._stop.is_set():
            if self._resume.wait(0.1):
                self._audio_error = None
                audio = self._open_audio()
                self._audio = audio
                if audio.start(lambda frame: pipeline.push_frame(frame, 0.0)) is False:
                    message = self._audio_error or "the device could not be opened"
                    self._listener.on_state("paused", f"Paused: {message}")
                    self._resume.clear()
                    continue
                self._listener.on_state("running", "Listening")
                return audio
        return None

    def _pump(self, pipeline: ConversationPipeline, audio: AudioSource) -> None:
        last_status = 0.0
        while not self._stop.is_set():
            if self._audio_error is not None:
                resumed = self._pause_for_audio(pipeline)
                if resumed is None:
                    return
                audio = resumed
            event = self._next(pipeline, 0.05)
            if event is not None:
                if isinstance(event, ev.AudioOut):
                    audio.play(event.pcm)  # straight to the jitter buffer, never via Qt
                elif isinstance(event, ev.EngineStopped):
                    if event.reason == "error":
                        raise RuntimeError("the speech engine stopped after an error")
                    return
                else:
                    self._handle(event)
            now = time.monotonic()
            if now - last_status >= self._status_interval_s:
                last_status = now
                mic, speaker = audio.levels()
                counters = audio.counters()
                self._status = _with(self._status, mic_db=mic, speaker_db=speaker,
                                     dropped_frames=counters.get("dropped", 0)
                                     + self._engine_dropped(),
                                     underruns=counters.get("underruns", 0),
                                     overruns=counters.get("overruns", 0))
                self._listener.on_status(self._status)

    def _engine_dropped(self) -> int:
        pipeline = self._pipeline
        return pipeline.dropped_frames if pipeline is not None else 0

    def _handle(self, event: object) -> None:
        if isinstance(event, ev.FrameStats):
            self._status = _with(self._status, frame_ms=event.frame_ms,
                                 context_used=event.context.used,
                                 span_positions_in_window=event.context.span_positions_in_window)
        elif isinstance(event, oe.LlmStatus):
            self._status = _with(self._status, llm_state=event.state, llm_message=event.message)
        for entry in self._builder.entries_for(event):
            self._listener.on_entry(entry)

    def _shutdown(self) -> None:
        if self._audio is not None:
            self._audio.stop()
        if self._pipeline is not None:
            self._pipeline.stop()
        with self._lock:
            self._engine = None


def _with(status: SessionStatus, **changes) -> SessionStatus:
    from dataclasses import replace

    return replace(status, **changes)
