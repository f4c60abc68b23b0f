"""The whole conversation: engine, ASR and orchestrator wired together.

Audio frames fan out to the engine and the ASR. All stages emit into one queue; a router
thread forwards what the orchestrator needs (the user's words, the model's words, span
landings, audio frames) and passes every event on to `events` for the UI or a transcript.
"""

from __future__ import annotations

import queue
import threading
from typing import Protocol

import numpy as np

from app.asr.events import AsrError, AsrFinal, AsrPartial, AsrWord
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
                 orchestrator: Orchestrator | None = None) -> None:
        self.engine = engine
        self.asr = asr
        self.orchestrator = orchestrator
        self._merged: queue.SimpleQueue = queue.SimpleQueue()
        engine.events = self._merged
        if asr is not None:
            asr.events = self._merged
        if orchestrator is not None:
            orchestrator.events = self._merged
        self.events: queue.SimpleQueue = queue.SimpleQueue()
        self._stop = threading.Event()
        self._router = threading.Thread(target=self._route, name="pipeline-router", daemon=True)

    def start(self) -> None:
        self._router.start()
        if self.orchestrator is not None:
            self.orchestrator.start()
        if self.asr is not None:
            self.asr.start()
        self.engine.start()

    def push_frame(self, pcm: np.ndarray, timeout: float | None = 0.0) -> bool:
        """One 80 ms frame of the user's audio to every stage that listens."""
        accepted = self.engine.push_frame(pcm, timeout)
        if self.asr is not None:
            self.asr.push_frame(pcm, timeout)
        return accepted

    def finish_input(self) -> None:
        if self.asr is not None:
            self.asr.finish_input()
        self.engine.finish_input()

    def stop(self, timeout: float = 10.0) -> bool:
        ok = self.engine.stop(timeout)
        if self.asr is not None:
            ok = self.asr.stop(timeout) and ok
        if self.orchestrator is not None:
            ok = self.orchestrator.stop(timeout) and ok
        self._stop.set()
        self._router.join(timeout)
        return ok and not self._router.is_alive()

    def _route(self) -> None:
        orchestrator = self.orchestrator
        while not self._stop.is_set():
            try:
                event = self._merged.get(timeout=0.1)
            except queue.Empty:
                continue
            if orchestrator is not None:
                if isinstance(event, _ASR_EVENTS):
                    orchestrator.on_asr_event(event)
                else:
                    orchestrator.on_engine_event(event)
            self.events.put(event)
