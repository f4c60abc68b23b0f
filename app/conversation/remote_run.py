"""`python main.py run --server URL`: an audio file through a speech model on a server, the
app as its client: the reply audio and the JSONL transcript as `run` writes them
(headless.py), with no torch needed on this machine.

The speech model steps once per frame it receives, so the file goes at the server's and
the link's pace: at most `WINDOW_FRAMES` frames are unanswered at a time (`--realtime`
holds it to 80 ms a frame as well). No frame is dropped, so the reply is as long as the
input. The LLM side (when asked for) runs here, on the server's words with `--asr server`
or on this machine's recogniser, and its answers go over the wire as spans; its latency is
the real one, not replayed in frames (a server's conversation runs on its own).
A network stall shorter than the link's heartbeat allows (15 s) is waited for, the run going
on where it was; the link line counts the stalls. A lost connection ends the run with an
error: the server's conversation is gone with it.
The transcript's last line but one says what the link carried (`type` "link").
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from app.audio_file import write_wav_24k
from app.conversation.assembly import build_backend, build_pipeline
from app.conversation.config import ConversationConfig
from app.conversation.headless import (
    PACE_REALTIME,
    HeadlessRunError,
    Injection,
    RunSummary,
    _Follower,
)
from app.conversation.pipeline import ConversationPipeline
from app.conversation.run_records import LinkRecord
from app.frames import FRAME_RATE, FRAME_S, FRAME_SAMPLES, SAMPLE_RATE
from app.install_kind import engine_installed, needs_full_install

if TYPE_CHECKING:
    from app.conversation.assembly import Device
    from app.llm.backend import LLMBackend
    from app.remote.remote_engine import RemoteEngine

PACE_SERVER = "the server's (frames as fast as it answers)"
# Frames given to the server and not answered yet, at most: enough to keep a link with a
# round trip of a few frames busy, few enough that nothing waits long in a queue.
WINDOW_FRAMES = 4
CONNECT_TIMEOUT_S = 60.0  # the server warms its engine up before `ready`
ANSWER_TIMEOUT_S = 60.0  # a frame unanswered this long: the server is not serving


def run_remote(config: ConversationConfig, pcm: npt.NDArray[np.float32], output_path: Path,
               transcript_path: Path, injections: Sequence[Injection], *,
               timeout_s: float = 3600.0, input_name: str = "",
               backend: LLMBackend | None = None) -> RunSummary:
    """`pcm` (24 kHz mono) through the speech model of `config.server`. Raises
    HeadlessRunError (RemoteEngineError when the server cannot be used at all)."""
    from app.conversation.assembly import connect_remote

    config, device = _recogniser(config)
    if backend is None and config.has_llm:
        try:
            backend = build_backend(config)
        except ValueError as exc:  # an unknown backend, a server without its URL
            raise HeadlessRunError(str(exc)) from exc
    engine = connect_remote(config, CONNECT_TIMEOUT_S, for_file=True, where="--server")
    assert engine is not None  # no cancel: it connects or raises
    pipeline = build_pipeline(engine, config, device, backend=backend)
    frames = -(-len(pcm) // FRAME_SAMPLES)
    padded = np.zeros(frames * FRAME_SAMPLES, dtype=np.float32)
    padded[: len(pcm)] = pcm
    pace = PACE_REALTIME if config.realtime else PACE_SERVER
    retrieval = engine.retrieval
    header = {"input": input_name, "frames": frames, "paced": pace,
              "trigger": retrieval.trigger if pipeline.orchestrator and retrieval else None}
    feeder = _RemoteFeeder(engine, pipeline, padded, injections, pace)
    follower = _Follower(engine.spans_pending, pipeline, frames, header,
                         last_lines=lambda: [_link_line(engine, frames)])
    start = time.perf_counter()
    pipeline.start()
    feeder.start()

    def write_reply() -> None:
        try:
            write_wav_24k(output_path, follower.out_pcm[: len(pcm)])
        except OSError as exc:
            raise HeadlessRunError(f"cannot write the reply audio {output_path}: "
                                   f"{exc.strerror or exc}") from exc

    follower.follow(transcript_path, feeder, timeout_s, write_reply)
    elapsed = time.perf_counter() - start
    if follower.failure:
        raise HeadlessRunError(follower.failure[0])
    return RunSummary(frames, len(pcm) / SAMPLE_RATE, elapsed, follower.landed,
                      "".join(follower.text_parts))


def _recogniser(config: ConversationConfig) -> tuple[ConversationConfig, Device]:
    """Where this machine's recogniser runs, if the run has one (the server's needs none).
    One in an install without the engine is an error: the run asked for exactly that."""
    if not config.has_stt or config.stt_on_server:
        return config, "cpu"
    if not engine_installed():
        raise HeadlessRunError(needs_full_install(f"--asr {config.stt_model} (speech "
                                                  "recognition on this computer)")
                               + "; or let the server recognise: --asr server")
    from app.engine.device import choose_device

    return config, choose_device(config.device)


def _link_line(engine: RemoteEngine, frames: int) -> LinkRecord:
    """What the link carried, each way, over the input's duration."""
    stats = engine.network_stats()
    seconds = max(frames * FRAME_S, FRAME_S)
    streams = engine.stream_bytes()

    def rates(way: str) -> dict[str, float]:
        return {stream: round(count * 8 / seconds / 1000, 1)
                for stream, count in sorted(streams.get(way, {}).items())}

    return LinkRecord(
        audio_codec=stats.audio_codec, bytes_sent=stats.bytes_sent,
        bytes_received=stats.bytes_received,
        kbit_s_up=round(stats.bytes_sent * 8 / seconds / 1000, 1),
        kbit_s_down=round(stats.bytes_received * 8 / seconds / 1000, 1),
        frame_rtt_ms=_round(stats.frame_rtt_ms), network_rtt_ms=_round(stats.network_rtt_ms),
        late_frames=stats.late_frames, most_in_flight=engine.most_in_flight,
        frames_not_sent=engine.dropped_frames, kbit_s_up_by_stream=rates("sent"),
        kbit_s_down_by_stream=rates("received"), stalls=engine.stalls,
        longest_stall_s=engine.longest_stall_s)


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


class _RemoteFeeder:
    """The file's frames to the server, on a thread: each once the server has answered all
    but `WINDOW_FRAMES`; each `--inject` sent just before the frame it is for."""

    def __init__(self, engine: RemoteEngine, pipeline: ConversationPipeline,
                 padded: npt.NDArray[np.float32], injections: Sequence[Injection],
                 pace: str) -> None:
        self.engine = engine
        self.pipeline = pipeline
        self.padded = padded
        self.pace = pace
        self.due: dict[int, list[Injection]] = {}
        for injection in injections:
            self.due.setdefault(int(injection.at_seconds * FRAME_RATE), []).append(injection)
        self.failure: list[str] = []
        self.stopping = threading.Event()
        self._thread = threading.Thread(target=self._feed, name="file-feeder", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def stop(self, timeout: float) -> None:
        self.stopping.set()
        self._thread.join(timeout)

    def _feed(self) -> None:
        engine = self.engine
        frames = len(self.padded) // FRAME_SAMPLES
        try:
            next_at = time.monotonic()
            for i in range(frames):
                for injection in self.due.pop(i, []):
                    engine.inject(injection.text, injection.source)
                if self.pace == PACE_REALTIME:  # never faster than a microphone
                    next_at += FRAME_S
                    if self.stopping.wait(max(0.0, next_at - time.monotonic())):
                        return
                if not engine.wait_for_room(WINDOW_FRAMES - 1, ANSWER_TIMEOUT_S):
                    if not self.stopping.is_set() and engine.connected:
                        self.failure.append(f"the speech server answered nothing for "
                                            f"{ANSWER_TIMEOUT_S:g} s (at frame {i})")
                    return  # a lost connection is the engine's error, said already
                frame = self.padded[i * FRAME_SAMPLES : (i + 1) * FRAME_SAMPLES]
                while not self.pipeline.push_frame(frame, 1.0):
                    if not engine.connected or self.stopping.is_set():
                        return
            self.pipeline.finish_input(10.0)
        except Exception as exc:  # reported through `failure`, never a silent stop
            self.failure.append(f"feeding the speech server failed: {exc}")

