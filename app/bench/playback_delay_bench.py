"""`python main.py bench playback-delay`: how long the model's voice waits before the speaker.

A real ConversationSession (the app's own wiring) runs the tiny model on this machine's CPU,
with a microphone that plays silence at a microphone's pace and no LLM. The engine stamps
each frame of the model's audio when it is ready (`AudioOut.monotonic_s`); the audio source
stamps the moment `play()` hands it to the jitter buffer. The difference is the voice's
way from the engine to the speaker side: the queue hops and whatever runs on that way.

Two runs of the same conversation: an idle listener, and a slow one whose `on_entry` and
`on_status` sleep (a transcript listener or a GUI thread that is busy drawing: the session
calls its listener on its own thread). The voice should not care which.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from app.conversation.audio_source import FrameSink
from app.engine.events import AudioOut, EngineEvent
from app.engine.row_conversation import RowConversation
from app.frames import FRAME_SAMPLES

INCLUDES = {
    "delay_ms": "per frame of the model's audio: time.monotonic() at AudioSource.play() minus "
                "AudioOut.monotonic_s (set when the engine thread made the frame, before it "
                "left the engine): the event queues, the pipeline's router, and whatever "
                "thread carries the frame to play() with all it does first",
    "frames": "frames of the model's audio made and played while the run lasted",
    "not_played": "frames the engine made that had not reached play() when the run ended",
    "listener_sleep_ms": "how long each on_entry and on_status call of the slow listener "
                         "sleeps (0: the idle run)",
    "entries": "transcript entries the listener was handed during the run (the tiny model's "
               "random words, mostly)",
    "load_average_1_min": "the machine's run-queue length at the end (os.getloadavg): above "
                          "the core count, other work competed with the conversation's "
                          "threads",
}


class _StampedFrames:
    """The engine's AudioOut times, by the identity of the frame's array (the array the
    engine made is the one play() gets; kept here so its id is not reused)."""

    def __init__(self) -> None:
        self._ready: dict[int, tuple[np.ndarray, float]] = {}
        self._lock = threading.Lock()

    def made(self, audio: AudioOut) -> None:
        with self._lock:
            self._ready[id(audio.pcm)] = (audio.pcm, audio.monotonic_s)

    def played(self, pcm: np.ndarray) -> float | None:
        with self._lock:
            found = self._ready.pop(id(pcm), None)
        return None if found is None else found[1]

    def left(self) -> int:
        with self._lock:
            return len(self._ready)


@contextmanager
def _stamping(stamps: _StampedFrames) -> Iterator[None]:
    """Every conversation's AudioOut is noted as it leaves the engine (the bench's only tap
    into the engine: the session builds its own)."""
    original = RowConversation.emit

    def emit(engine: RowConversation, event: EngineEvent) -> None:
        if isinstance(event, AudioOut):
            stamps.made(event)
        original(engine, event)

    setattr(RowConversation, "emit", emit)  # noqa: B010 (a bench's tap, put back below)
    try:
        yield
    finally:
        setattr(RowConversation, "emit", original)  # noqa: B010


class _RecordingSpeaker:
    """Silence in at a microphone's pace (FileAudioSource's feeder); play() is timed."""

    def __init__(self, stamps: _StampedFrames) -> None:
        from app.audio.file_source import FileAudioSource

        self._source = FileAudioSource(np.zeros(FRAME_SAMPLES, np.float32), keep_played_frames=1)
        self._stamps = stamps
        self.delays_ms: list[float] = []
        self.measuring = False

    @property
    def muted(self) -> bool:
        return self._source.muted

    @muted.setter
    def muted(self, value: bool) -> None:
        self._source.muted = value

    def start(self, on_frame: FrameSink) -> None:
        self._source.start(on_frame)

    def play(self, frame: np.ndarray) -> None:
        now = time.monotonic()
        made = self._stamps.played(frame)
        if made is not None and self.measuring:
            self.delays_ms.append((now - made) * 1000.0)
        self._source.play(frame)

    def levels(self) -> tuple[float, float]:
        return self._source.levels()

    def counters(self) -> dict[str, int]:
        return self._source.counters()

    def stop(self, timeout: float = 5.0) -> bool:
        return self._source.stop(timeout)


class _Listener:
    def __init__(self, sleep_s: float) -> None:
        self._sleep_s = sleep_s
        self.running = threading.Event()
        self.ended = threading.Event()
        self.entries = 0
        self.last_state: tuple[str, str] = ("", "")

    def on_state(self, state: str, detail: str) -> None:
        self.last_state = (state, detail)
        if state == "running":
            self.running.set()
        elif state in ("stopped", "error", "model_missing"):
            self.ended.set()

    def on_entry(self, _entry: Any) -> None:
        self.entries += 1
        if self._sleep_s:
            time.sleep(self._sleep_s)

    def on_status(self, _status: Any) -> None:
        if self._sleep_s:
            time.sleep(self._sleep_s)


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def _one_run(seconds: float, sleep_s: float, model: str) -> dict:
    from app.conversation.session import CheckpointCache, ConversationSession
    from app.settings.schema import AppSettings, LlmSettings, SpeechModelSettings

    stamps = _StampedFrames()
    speaker = _RecordingSpeaker(stamps)
    listener = _Listener(sleep_s)
    settings = AppSettings(speech=SpeechModelSettings(model_id=model, device="cpu"),
                           llm=LlmSettings(backend="none", stt_model="none"))
    with _stamping(stamps):
        session = ConversationSession(settings, listener, lambda _s: speaker, CheckpointCache())
        session.start()
        try:
            if not listener.running.wait(300.0):
                raise RuntimeError(f"the session did not start: {listener.last_state}")
            time.sleep(1.0)  # the first frames after start-up are not the steady state
            speaker.measuring = True
            time.sleep(seconds)
            speaker.measuring = False
            not_played = stamps.left()
        finally:
            session.stop(30.0)
    delays = speaker.delays_ms
    if not delays:
        raise RuntimeError("no frame of the model's audio was played")
    return {
        "listener_sleep_ms": round(sleep_s * 1000.0, 1),
        "frames": len(delays),
        "not_played": not_played,
        "entries": listener.entries,
        "delay_ms": {"p50": round(_percentile(delays, 0.5), 2),
                     "p99": round(_percentile(delays, 0.99), 2),
                     "max": round(max(delays), 2)},
    }


def run_playback_delay_bench(seconds: float = 10.0, listener_ms: float = 50.0,
                             model: str = "tiny") -> dict:
    """The engine-to-play() delay with an idle listener and with a slow one."""
    from app.bench.pipeline_bench import ensure_built_in_child

    ensure_built_in_child(model)
    runs = {"idle": _one_run(seconds, 0.0, model),
            "slow_listener": _one_run(seconds, listener_ms / 1000.0, model)}
    return {"model": model, "seconds": seconds, **runs,
            "load_average_1_min": round(os.getloadavg()[0], 2), "includes": INCLUDES}


def describe(result: dict) -> str:
    lines = [f"engine AudioOut -> AudioSource.play() on {result['model']} (cpu), "
             f"{result['seconds']:g} s per run:"]
    for name in ("idle", "slow_listener"):
        run = result[name]
        delay = run["delay_ms"]
        lines.append(f"  {name:14} listener sleeps {run['listener_sleep_ms']:5.1f} ms: "
                     f"p50 {delay['p50']:8.2f} ms  p99 {delay['p99']:8.2f} ms  "
                     f"max {delay['max']:8.2f} ms  ({run['frames']} frames, "
                     f"{run['not_played']} not played at the end, {run['entries']} entries)")
    lines.append(f"  load average {result['load_average_1_min']}")
    lines.append("What the numbers include:")
    lines.extend(f"  {key}: {text}" for key, text in result["includes"].items())
    return "\n".join(lines)
