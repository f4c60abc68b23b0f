"""The whole conversation: engine, ASR and orchestrator wired together.

Audio frames fan out to the engine and the ASR, through the voice leveller's thread when
there is one (both then hear the same levelled voice, as the reference serves it). All
stages emit into one queue; a router thread forwards what the orchestrator needs (the
user's words, the model's words and its <ret>, span landings, audio frames) and passes every
event on to `events` for the UI or a transcript.
"""

from __future__ import annotations

import queue
import threading
from typing import Protocol

import numpy as np

from app.asr.events import AsrError, AsrFinal, AsrPartial, AsrWord
from app.audio.levelling_stage import LevellingStage
from app.engine.duplex_engine import DuplexEngine
from app.orchestrator.orchestrator import Orchestrator

_ASR_EVENTS = (AsrWord, AsrPartial, AsrFinal, AsrError)


class AsrStage(Protocol):
    events: queue.SimpleQueue

    def start(self) -> None: ...
    def push_frame(self, pcm: np.ndarray, timeout: float | None = 0.0) -> bool: ...
    def finish_input(self, timeout: float = 10.0) -> None: ...
    def stop(self, timeout: float = 10.0) -> bool: ...


class ConversationPipeline:
    def __init__(self, engine: DuplexEngine, asr: AsrStage | None = None,
                 orchestrator: Orchestrator | None = None,
                 leveller: bool | None = None) -> None:
        """`leveller`: None, no levelling stage; True or False, a stage that levels (or
        passes frames through; `set_level_voice` switches it while running)."""
        self.engine = engine
        self.asr = asr
        self.orchestrator = orchestrator
        self.leveller: LevellingStage | None = None
        if leveller is not None:
            self.leveller = LevellingStage(self._consumers(), enabled=leveller,
                                           on_end_of_input=self._finish_stages)
        self._merged: queue.SimpleQueue = queue.SimpleQueue()
        engine.events = self._merged
        if asr is not None:
            asr.events = self._merged
        if orchestrator is not None:
            orchestrator.events = self._merged
        self.events: queue.SimpleQueue = queue.SimpleQueue()
        self._stop = threading.Event()
        self._router = threading.Thread(target=self._route, name="pipeline-router", daemon=True)

    def _consumers(self) -> list:
        consumers = [self.engine.push_frame]
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

    def set_level_voice(self, enabled: bool) -> None:
        if self.leveller is not None:
            self.leveller.set_enabled(enabled)

    @property
    def dropped_frames(self) -> int:
        """Frames of the user's audio that some stage never got (a full queue)."""
        dropped = self.engine.dropped_frames
        if self.leveller is not None:
            dropped += self.leveller.dropped_frames + self.leveller.dropped_downstream
        return dropped

    def push_frame(self, pcm: np.ndarray, timeout: float | None = 0.0) -> bool:
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
        self._router.join(timeout)
        return ok and not self._router.is_alive()

    def _route(self) -> None:
        while not self._stop.is_set():
            try:
                event = self._merged.get(timeout=0.1)
            except queue.Empty:
                continue
            orchestrator = self.orchestrator
            if orchestrator is not None:
                if isinstance(event, _ASR_EVENTS):
                    orchestrator.on_asr_event(event)
                else:
                    orchestrator.on_engine_event(event)
            self.events.put(event)
