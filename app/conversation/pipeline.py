"""The whole conversation: engine, ASR and orchestrator wired together.

Audio frames fan out to the engine and the ASR, through the voice leveller's thread when
there is one (both then hear the same levelled voice, as the reference serves it). All
stages emit into one queue; a router thread forwards what the orchestrator needs (the
user's words, the model's words and its <ret>, span landings, the frame clock) and passes
every event on to `events` for the UI or a transcript. The model's voice goes first, to the
audio sink when there is one (the session's speaker: `set_audio_sink`), from the router's
own thread, so nothing the reader of `events` does (settings, the transcript, a slow
listener) can hold it back on its way to the jitter buffer.

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

from app.audio.levelling_stage import FrameConsumer, LevellingStage
from app.conversation.lock_step import ASR_EVENTS, LockStep
from app.engine.events import AudioOut
from app.engine.speech_engine import SpeechEngine
from app.orchestrator.orchestrator import Orchestrator

log = logging.getLogger(__name__)

AudioSink = Callable[[AudioOut], None]


class AsrStage(Protocol):
    events: queue.SimpleQueue[Any]  # the pipeline's merged queue once wired
    dropped_frames: int  # frames its full queue refused

    def start(self) -> None: ...
    def push_frame(self, pcm: npt.NDArray[np.float32], timeout: float | None = 0.0) -> bool: ...
    def finish_input(self, timeout: float | None = 10.0) -> None: ...
    def stop(self, timeout: float = 10.0) -> bool: ...
    def wait_frames(self, count: int, timeout: float) -> bool: ...


class ConversationPipeline:
    def __init__(self, engine: SpeechEngine, asr: AsrStage | None = None,
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
        # Every stage's events (each stage types its own queue), and a lock-step's fences.
        self._merged: queue.SimpleQueue[Any] = queue.SimpleQueue()
        engine.events = self._merged
        if asr is not None:
            asr.events = self._merged
        if orchestrator is not None:
            orchestrator.events = self._merged
        self.events: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._stop = threading.Event()
        self.lock_step = lock_step
        self._route_event: Callable[[object], None] = self._deliver
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

    def set_orchestrator(self, orchestrator: Orchestrator | None, timeout: float = 5.0) -> None:
        """Settings changed while running: a new LLM side (or none); the old one stops."""
        old = self.orchestrator
        if orchestrator is not None:
            orchestrator.events = self._merged
            orchestrator.start()
        self.orchestrator = orchestrator  # the router reads it per event
        if old is not None and old is not orchestrator:
            old.stop(timeout)

    def set_audio_sink(self, sink: AudioSink | None) -> None:
        """Hand the model's audio frames to `sink` (called on the router's thread, the
        moment the router has the frame, before anything else sees it) instead of putting
        them in `events`. None: the frames go to `events`, as a headless run records them."""
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

    def _deliver(self, event: object) -> None:
        played = isinstance(event, AudioOut) and self._play(event)
        orchestrator = self.orchestrator
        if orchestrator is not None:
            if isinstance(event, ASR_EVENTS):
                orchestrator.on_asr_event(event)
            else:
                orchestrator.on_engine_event(event)
        if not played:
            self.events.put(event)

    def _play(self, audio: AudioOut) -> bool:
        """The frame to the audio sink; False when there is none (it goes to `events`)."""
        sink = self._audio_sink
        if sink is None:
            return False
        try:
            sink(audio)
        except Exception:  # a failing speaker must not stop the conversation
            log.exception("the audio sink failed on frame %d", audio.frame_index)
        return True
