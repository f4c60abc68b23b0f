"""`python main.py run`: an audio file through the whole engine, as fast as it goes.

Writes the reply audio (the input's duration) and a JSONL transcript: the model's text
pieces with their frame index, and each span with its source and the frame before which
each of its chunks landed, with K.

Pace: without an LLM side the frames go in as fast as the engine takes them. With one, the
run replays the LLM's latency in frames (the pipeline in lock-step, see
app/conversation/lock_step.py and docs/replay.md): the answer lands at the frame it would
have reached in real time, so the transcript is the same on a slow laptop and a fast GPU.
`realtime` feeds at a microphone's pace instead.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from app.audio_file import prove_writable, read_mono_24k, write_wav_24k
from app.checkpoints.catalog import get_manifest
from app.conversation.assembly import (
    build_backend,
    build_engine,
    build_pipeline,
    engine_options,
    load_speech_model,
)
from app.conversation.config import ConversationConfig
from app.conversation.lock_step import LockStep, PipelineStalled
from app.conversation.pipeline import ConversationPipeline
from app.conversation.remote_run import run_remote
from app.conversation.run_follower import RunFollower
from app.conversation.run_request import (
    PACE_FAST,
    PACE_REALTIME,
    PACE_REPLAY,
    HeadlessRun,
    HeadlessRunError,
    RunSummary,
)
from app.frames import FRAME_RATE, FRAME_SAMPLES, SAMPLE_RATE
from app.install_kind import engine_installed, needs_full_install
from app.llm.backend import LLMBackend
from app.settings.schema import LlmSettings
from app.settings.store import field_range

if TYPE_CHECKING:  # torch: `run --server` runs in the thin client's install, without it
    from app.asr.stt_catalog import LoadedStt
    from app.checkpoints.loader import LoadedCheckpoint
    from app.engine.speech_engine import EngineOptions

REPLAY_MARGIN_S = 30.0  # a replay frame may wait this much longer than the LLM's timeout


def check_output_paths(input_path: Path, outputs: list[Path]) -> None:
    """Fail before the run, not after it: each output must be a file we can create. The
    temporary file each is written through is made, filled a little and removed, since a
    folder can pass every permission check and still take no file (`/proc`, a full disk)."""
    seen: set[Path] = set()
    for path in outputs:
        path = Path(path)
        resolved = path.resolve()
        if resolved == Path(input_path).resolve():
            raise HeadlessRunError(f"{path} is the input file: choose another output")
        if resolved in seen:
            raise HeadlessRunError(f"{path} is named twice: the reply and the transcript "
                                   "need their own files")
        seen.add(resolved)
        if path.is_dir():
            raise HeadlessRunError(f"{path} is a folder: give a file name")
        folder = path.parent
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise HeadlessRunError(f"cannot create the folder {folder}: "
                                   f"{exc.strerror or exc}") from exc
        if not os.access(folder, os.W_OK):
            raise HeadlessRunError(f"cannot write into {folder}")
        try:
            prove_writable(path)
        except OSError as exc:
            raise HeadlessRunError(f"cannot write {path} (a file in {folder} could not be "
                                   f"made and filled: {exc.strerror or exc})") from exc


def _on_stderr(message: str) -> None:
    """What the engine's warm-up says while it takes a while (compiling the step, `--compile`):
    a run's terminal shows it, nothing else does meanwhile."""
    print(message, file=sys.stderr, flush=True)


def _check_llm_timeout(conversation: ConversationConfig) -> None:
    limits = field_range(LlmSettings, "timeout_s")
    assert limits is not None  # the setting declares its range
    low, high = limits
    if not low <= conversation.timeout_s <= high:  # NaN fails too
        raise HeadlessRunError(f"--llm-timeout must be from {low:g} to {high:g} seconds")


def run_headless(config: ConversationConfig, run: HeadlessRun) -> RunSummary:
    """`run.input_path` through the conversation `config` describes (the speech model, and
    its LLM side where it has one), the reply and the transcript into `run`'s outputs."""
    input_path, output_path, transcript_path = run.input_path, run.output_path, \
        run.transcript_path
    injections, ret_at, seed, chunk_limit = run.injections, run.ret_at, run.seed, \
        run.chunk_limit
    get_manifest(config.model_id)  # an unknown model fails first
    check_output_paths(input_path, [output_path, transcript_path])
    _check_llm_timeout(config)
    pcm = read_mono_24k(input_path)
    duration = len(pcm) / SAMPLE_RATE
    for injection in injections:
        if not 0 <= injection.at_seconds <= duration:
            raise HeadlessRunError(
                f"--at {injection.at_seconds:g} is outside the input (0 to {duration:.2f} s)"
            )
    for seconds in ret_at:
        if not 0 <= seconds <= duration:
            raise HeadlessRunError(
                f"--ret-at {seconds:g} is outside the input (0 to {duration:.2f} s)")
    if config.server is not None:  # the speech model on a server: this machine needs no torch
        if ret_at or chunk_limit is not None or seed is not None or config.custom_folder:
            raise HeadlessRunError("--ret-at, --chunk-limit, --seed and --folder choose the "
                                   "speech model's run: with --server the server's applies")
        return run_remote(config, pcm, output_path, transcript_path, injections,
                          timeout_s=run.timeout_s, input_name=str(input_path))
    if not engine_installed():
        raise HeadlessRunError(needs_full_install("The speech model on this computer")
                               + "; or run it on a server: run --server URL")
    from app.engine.device import uses_mlx

    if run.mimi != "auto" and not uses_mlx(config.device):
        raise HeadlessRunError(f"--mimi {run.mimi} chooses the MLX engine's Mimi (--device "
                               "mlx); the torch engine runs torch's")
    checkpoint = load_speech_model(config)
    options = engine_options(config, seed=seed, chunk_limit=chunk_limit,
                             forced_ret_frames=frozenset(int(s * FRAME_RATE) for s in ret_at),
                             mimi=run.mimi, warmup_notice=_on_stderr)
    return run_conversation(checkpoint, pcm, config, run, options)


def run_conversation(
    checkpoint: LoadedCheckpoint,
    pcm: npt.NDArray[np.float32],
    conversation: ConversationConfig,
    run: HeadlessRun,
    options: EngineOptions,
    *,
    stt: LoadedStt | None = None,
    backend: LLMBackend | None = None,
) -> RunSummary:
    """One conversation on an already loaded checkpoint: `pcm` (24 kHz mono) in, the reply
    audio and the JSONL transcript into `run`'s outputs (`run.input_path` only names the
    input). `stt` (a loaded STT) lets a series of runs share what is slow to load;
    `backend`: an LLM backend to ask instead of `conversation.backend`'s (the conversation
    closes it when it ends)."""
    output_path, transcript_path, injections = run.output_path, run.transcript_path, \
        run.injections
    timeout_s, engine_hook, input_name = run.timeout_s, run.engine_hook, str(run.input_path)
    _check_llm_timeout(conversation)
    config = conversation
    if backend is None and config.has_llm:
        try:
            backend = build_backend(config)
        except ValueError as exc:  # an unknown backend, a server without its URL
            raise HeadlessRunError(str(exc)) from exc
    engine = build_engine(checkpoint, options)
    if engine_hook is not None:
        engine_hook(engine)
    has_llm = backend is not None
    pace = PACE_REALTIME if config.realtime else PACE_REPLAY if has_llm else PACE_FAST
    pipeline = build_pipeline(engine, config, checkpoint.device,
                              lock_step=LockStep() if pace == PACE_REPLAY else None, stt=stt,
                              backend=backend)
    for injection in injections:
        engine.inject(injection.text, injection.source,
                      at_frame=int(injection.at_seconds * FRAME_RATE))
    frames = -(-len(pcm) // FRAME_SAMPLES)
    padded = np.zeros(frames * FRAME_SAMPLES, dtype=np.float32)
    padded[: len(pcm)] = pcm
    llm_timeout = conversation.timeout_s if conversation else 0.0
    feeder = _Feeder(pipeline, padded, pace, timeout_s, llm_timeout + REPLAY_MARGIN_S)
    header = {"input": input_name, "frames": frames, "paced": pace,
              "trigger": (checkpoint.manifest.retrieval.trigger if pipeline.orchestrator
                          else None)}
    start = time.perf_counter()
    pipeline.start()
    feeder.start()
    follower = RunFollower(engine.injector.has_pending, pipeline, frames, header)

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


class _Feeder:
    """The input's frames into the pipeline, on a thread, at the run's pace. A failure (a
    late engine in real time, a stalled stage in a replay) goes to `failure`."""

    def __init__(self, pipeline: ConversationPipeline, padded: npt.NDArray[np.float32], pace: str,
                 first_frame_timeout_s: float, frame_timeout_s: float) -> None:
        self.pipeline = pipeline
        self.padded = padded
        self.pace = pace
        self.first_frame_timeout_s = first_frame_timeout_s  # the engine's start included
        self.frame_timeout_s = frame_timeout_s
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
        pipeline = self.pipeline
        lock_step = pipeline.lock_step  # there exactly when the pace is PACE_REPLAY
        frames = len(self.padded) // FRAME_SAMPLES
        try:
            next_at = time.monotonic()
            for i in range(frames):
                frame = self.padded[i * FRAME_SAMPLES : (i + 1) * FRAME_SAMPLES]
                if self.pace == PACE_REALTIME:  # a microphone's: a late engine drops frames
                    next_at += FRAME_SAMPLES / SAMPLE_RATE
                    if self.stopping.wait(max(0.0, next_at - time.monotonic())):
                        return
                    if not pipeline.push_frame(frame, 0.0):
                        self.failure.append(f"the engine fell behind real time at frame {i}")
                        return
                    continue
                if lock_step is not None:  # a replay: never ahead of what is handled
                    lock_step.wait_for_frame(i, self.first_frame_timeout_s if i == 1
                                             else self.frame_timeout_s)
                while not pipeline.push_frame(frame, 1.0):
                    if not pipeline.engine.running or self.stopping.is_set():
                        return
            pipeline.finish_input(10.0 if self.pace == PACE_REALTIME else None)
        except PipelineStalled as exc:
            if not self.stopping.is_set():
                self.failure.append(f"the replay stalled: {exc}")
        except Exception as exc:  # reported through `failure`, never a silent stop
            self.failure.append(f"feeding the engine failed: {exc}")
