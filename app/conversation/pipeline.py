"""The whole conversation: engine, ASR and orchestrator wired together.

Audio frames fan out to the engine and the ASR, through the voice leveller's thread when
there is one (both then hear the same levelled voice, as the reference serves it). Every
stage is given one sink, the router's queue (`send_events_to`: each takes its own events
only; what the queue carries is their union, events.py). A router thread sends each kind of
event where its table says: the user's words and the engine's events to the orchestrator
(which keeps what it needs: the words, the model's words and its <ret>, span landings, the
frame clock), then every event on to the pipeline's own sink (`send_events_to`: the
session's inbox, a server's connection; else the queue `events`, which a run records). The
model's voice goes first, to the audio sink when there is one (the session's speaker:
`set_audio_sink`), from the router's own thread, so nothing the reader of the events does
(settings, the transcript, a slow listener) can hold it back on its way to the jitter
buffer.

A file fed faster than real time with an LLM side goes in lock-step: the headless run
hands the pipeline a `LockStep` (lock_step.py), and the router routes each event through
it. A live conversation passes none, and its router hands each event on as it comes.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from app.asr.events import AsrEvent
from app.audio.levelling_stage import FrameConsumer, LevellingStage
from app.conversation.events import (
    ASR_EVENTS,
    ENGINE_EVENTS,
    LINK_EVENTS,
    ORCHESTRATOR_EVENTS,
    ConversationEvent,
    EventSink,
)
from app.conversation.lock_step import MARKS, LockStep, RouterItem
from app.engine.events import AudioOut, EngineEvent
from app.engine.speech_engine import SpeechEngine
from app.orchestrator.orchestrator import Orchestrator

log = logging.getLogger(__name__)

AudioSink = Callable[[AudioOut], None]


class AsrStage(Protocol):
    dropped_frames: int  # frames its full queue refused

    def send_events_to(self, sink: Callable[[AsrEvent], None]) -> None: ...
    def start(self) -> None: ...
    def push_frame(self, pcm: npt.NDArray[np.float32], timeout: float | None = 0.0) -> bool: ...
    def finish_input(self, timeout: float | None = 10.0) -> None: ...
    def stop(self, timeout: float = 10.0) -> bool: ...
    def wait_frames(self, count: int, timeout: float) -> bool: ...


class ConversationPipeline:
    def __init__(self, engine: SpeechEngine[ConversationEvent], asr: AsrStage | None = None,
                 orchestrator: Orchestrator | None = None,
                 leveller: bool | None = None, lock_step: LockStep | None = None) -> None:
        """`leveller`: None, no levelling stage; True or False, a stage that levels (or
        passes frames through; `set_level_voice` switches it while running). `lock_step`: a
        file's run, fed in lock-step (lock_step.py); None, a live conversation."""
        self.engine = engine
        self.asr = asr
        self.orchestrator = orchestrator
        self.leveller: LevellingStage | None = None
        if leveller is not None:
            self.leveller = LevellingStage(self._consumers(), enabled=leveller,
                                           on_end_of_input=self._finish_stages)
        # The router's queue: every stage's events (each stage's sink takes its own), and a
        # lock-step's fences.
        self._merged: queue.SimpleQueue[RouterItem] = queue.SimpleQueue()
        engine.send_events_to(self._merged.put)
        if asr is not None:
            asr.send_events_to(self._merged.put)
        if orchestrator is not None:
            orchestrator.send_events_to(self._merged.put)
        # Where the router hands every event on: `events`, until `send_events_to` says else.
        self.events: queue.SimpleQueue[ConversationEvent] = queue.SimpleQueue()
        self._out: EventSink = self.events.put
        # The router's table: each kind of event to the handler that sends it, in order, to
        # the speaker, the orchestrator and on (`_on`). A kind it does not name goes on.
        self._routes: dict[type, Callable[[Any], None]] = {
            AudioOut: self._voice,  # the speaker, the orchestrator's clock; on without a speaker
            **dict.fromkeys((kind for kind in ENGINE_EVENTS if kind is not AudioOut),
                            self._to_orchestrator_and_on),  # it keeps what it reads
            **dict.fromkeys(ASR_EVENTS, self._heard),  # the orchestrator, then on
            **dict.fromkeys(ORCHESTRATOR_EVENTS + LINK_EVENTS, self._on),  # on only
        }
        self._stop = threading.Event()
        self.lock_step = lock_step
        self._route_event: Callable[[RouterItem], None] = self._deliver_item
        if lock_step is not None:
            lock_step.join(self, self._merged.put, self._deliver)
            self._route_event = lock_step.route
        self._audio_sink: AudioSink | None = None
        self._router = threading.Thread(target=self._route, name="pipeline-router", daemon=True)

    def _consumers(self) -> list[FrameConsumer]:
        consumers: list[FrameConsumer] = [self.engine.push_frame]
        if self.asr is not None:
            consumers.append(self.asr.push_frame)
        return consumers

    def start(self) -> None:
        self._router.start()
        if self.orchestrator is not None:
            self.orchestrator.start()
        if self.asr is not None:
            self.asr.start()
        self.engine.start()
        if self.leveller is not None:
            self.leveller.start()

    def send_events_to(self, sink: EventSink) -> None:
        """Every event goes on to `sink` (the session's inbox, a server's loop) instead of
        `events`; given before `start`."""
        self._out = sink

    def set_orchestrator(self, orchestrator: Orchestrator | None, timeout: float = 5.0) -> None:
        """Settings changed while running: a new LLM side (or none); the old one stops."""
        old = self.orchestrator
        if orchestrator is not None:
            orchestrator.send_events_to(self._merged.put)
            orchestrator.start()
        self.orchestrator = orchestrator  # the router reads it per event
        if old is not None and old is not orchestrator:
            old.stop(timeout)

    def set_audio_sink(self, sink: AudioSink | None) -> None:
        """Hand the model's audio frames to `sink` (called on the router's thread, the
        moment the router has the frame, before anything else sees it) instead of passing
        them on with the other events. None: the frames go on, as a headless run records
        them."""
        self._audio_sink = sink

    def set_level_voice(self, enabled: bool) -> None:
        if self.leveller is not None:
            self.leveller.set_enabled(enabled)

    @property
    def dropped_frames(self) -> int:
        """Frames of the user's audio the model never heard (a full queue on its way)."""
        dropped = self.engine.dropped_frames
        if self.leveller is not None:  # the engine counts what the leveller could not hand on
            dropped += self.leveller.dropped_frames
        return dropped

    @property
    def asr_dropped_frames(self) -> int:
        """Frames of the user's audio the speech recognizer never heard."""
        if self.asr is None:
            return 0
        dropped = self.asr.dropped_frames
        if self.leveller is not None:
            dropped += self.leveller.dropped_frames
        return dropped

    def push_frame(self, pcm: npt.NDArray[np.float32], timeout: float | None = 0.0) -> bool:
        """One 80 ms frame of the user's audio to every stage that listens."""
        if self.leveller is not None:
            return self.leveller.push_frame(pcm, timeout)
        accepted = self.engine.push_frame(pcm, timeout)
        if self.asr is not None:
            self.asr.push_frame(pcm, timeout)
        return accepted

    def _finish_stages(self, timeout: float | None = 10.0) -> None:
        if self.asr is not None:
            self.asr.finish_input(timeout)
        self.engine.finish_input(timeout)

    def finish_input(self, timeout: float | None = 10.0) -> None:
        """No more frames. A file passes timeout None: it waits as long as the stages live."""
        if self.lock_step is not None:  # the recogniser's last events go on as they come
            self.lock_step.end_of_input()
        if self.leveller is not None:
            self.leveller.finish_input(timeout)
        else:
            self._finish_stages(timeout)

    def stop(self, timeout: float = 10.0) -> bool:
        ok = True
        if self.leveller is not None:
            ok = self.leveller.stop(timeout)
        ok = self.engine.stop(timeout) and ok
        if self.asr is not None:
            ok = self.asr.stop(timeout) and ok
        if self.orchestrator is not None:
            ok = self.orchestrator.stop(timeout) and ok
        self._stop.set()
        if self.lock_step is not None:  # a feeder waiting at the barrier is let go
            self.lock_step.stop()
        self._router.join(timeout)
        return ok and not self._router.is_alive()

    def _route(self) -> None:
        while not self._stop.is_set():
            try:
                event = self._merged.get(timeout=0.1)
            except queue.Empty:
                continue
            self._route_event(event)

    def _deliver_item(self, item: RouterItem) -> None:
        """A live conversation's router: each event as it comes (marks are a replay's: only
        a lock-step puts them, and its `route` reads them)."""
        if not isinstance(item, MARKS):
            self._deliver(item)

    def _deliver(self, event: ConversationEvent) -> None:
        """One event where the router's table sends it (what no stage names goes on)."""
        self._routes.get(type(event), self._on)(event)

    def _voice(self, audio: AudioOut) -> None:
        """The model's voice: the speaker first, then the orchestrator's clock; it goes on
        only when there is no speaker (a run records it)."""
        played = self._play(audio)
        self._to_orchestrator(audio)
        if not played:
            self._on(audio)

    def _heard(self, event: AsrEvent) -> None:
        """What the recogniser heard: to the orchestrator, then on."""
        orchestrator = self.orchestrator  # the router reads it per event
        if orchestrator is not None:
            orchestrator.on_asr_event(event)
        self._on(event)

    def _to_orchestrator_and_on(self, event: EngineEvent) -> None:
        self._to_orchestrator(event)
        self._on(event)

    def _to_orchestrator(self, event: EngineEvent) -> None:
        orchestrator = self.orchestrator
        if orchestrator is not None:  # it keeps what it reads, and the clock of the frames
            orchestrator.on_engine_event(event)

    def _on(self, event: ConversationEvent) -> None:
        self._out(event)  # read per event: the table is made before the sink is given

    def _play(self, audio: AudioOut) -> bool:
        """The frame to the audio sink; False when there is none (it goes on)."""
        sink = self._audio_sink
        if sink is None:
            return False
        try:
            sink(audio)
        except Exception:  # a failing speaker must not stop the conversation
            log.exception("the audio sink failed on frame %d", audio.frame_index)
        return True
