"""`python main.py run`: an audio file through the whole engine, as fast as it goes.

Writes the reply audio (the input's duration) and a JSONL transcript: the model's text
pieces with their frame index, and each span with its source and the frame before which
each of its chunks landed, with K.
"""

from __future__ import annotations

import json
import queue
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import numpy as np

from app.audio_file import read_mono_24k, write_wav_24k
from app.checkpoints.catalog import get_manifest
from app.checkpoints.loader import ensure_built, load_checkpoint
from app.engine import events as ev
from app.engine.device import choose_device
from app.engine.duplex_engine import FRAME_SAMPLES, SAMPLE_RATE, DuplexEngine, EngineOptions

FRAME_RATE = SAMPLE_RATE / FRAME_SAMPLES  # 12.5 Hz


class HeadlessRunError(RuntimeError):
    pass


@dataclass(frozen=True)
class Injection:
    text: str
    at_seconds: float
    source: str = "cli"


@dataclass(frozen=True)
class RunSummary:
    frames: int
    audio_seconds: float
    elapsed_seconds: float
    spans: int
    text: str


def _write(out: TextIO, record: dict) -> None:
    out.write(json.dumps(record, ensure_ascii=False) + "\n")


def run_headless(
    model_id: str,
    input_path: Path,
    output_path: Path,
    transcript_path: Path,
    injections: list[Injection],
    device: str | None = None,
    dtype: str | None = None,
    seed: int | None = None,
    folder: Path | None = None,
    voice: str | None = None,
    role: str | None = None,
    chunk_limit: int | None = None,
    timeout_s: float = 3600.0,
) -> RunSummary:
    from app.checkpoints.loader import parse_dtype

    manifest = get_manifest(model_id)
    pcm = read_mono_24k(input_path)
    duration = len(pcm) / SAMPLE_RATE
    frames = -(-len(pcm) // FRAME_SAMPLES)
    for injection in injections:
        if not 0 <= injection.at_seconds <= duration:
            raise HeadlessRunError(
                f"--at {injection.at_seconds:g} is outside the input (0 to {duration:.2f} s)"
            )
    torch_device = choose_device(device)
    checkpoint = load_checkpoint(
        manifest, ensure_built(manifest, folder), torch_device,
        parse_dtype(dtype) if dtype else None,
    )
    engine = DuplexEngine(
        checkpoint, EngineOptions(seed=seed, chunk_limit=chunk_limit, voice=voice, role=role)
    )
    for injection in injections:
        at_frame = int(injection.at_seconds * FRAME_RATE)
        engine.inject(injection.text, injection.source, at_frame=at_frame)

    padded = np.zeros(frames * FRAME_SAMPLES, dtype=np.float32)
    padded[: len(pcm)] = pcm
    failure: list[str] = []

    def feed() -> None:
        try:
            for i in range(frames):
                frame = padded[i * FRAME_SAMPLES : (i + 1) * FRAME_SAMPLES]
                while not engine.push_frame(frame, 1.0):
                    if not engine.running:
                        return
            engine.finish_input()
        except Exception as exc:  # reported through `failure`, never a silent stop
            failure.append(f"feeding the engine failed: {exc}")

    out_pcm = np.zeros(frames * FRAME_SAMPLES, dtype=np.float32)
    start = time.perf_counter()
    engine.start()
    feeder = threading.Thread(target=feed, name="file-feeder", daemon=True)
    feeder.start()
    spans: dict[int, dict] = {}
    text_parts: list[str] = []
    done = 0
    transcript_path.parent.mkdir(parents=True, exist_ok=True)
    with transcript_path.open("w", encoding="utf-8") as out:
        deadline = time.monotonic() + timeout_s
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                engine.stop()
                raise HeadlessRunError(f"the run did not finish within {timeout_s:.0f} s")
            try:
                event = engine.events.get(timeout=min(remaining, 1.0))
            except queue.Empty:
                if not engine.running and engine.events.empty():
                    break
                continue
            if isinstance(event, ev.EngineReady):
                _write(out, {
                    "type": "run", "model": event.model_id, "device": event.device,
                    "dtype": event.dtype, "input": str(input_path), "frames": frames,
                    "sample_rate": SAMPLE_RATE, "frame_rate": FRAME_RATE,
                    "chunk_limit": event.chunk_limit, "step_ms": event.step_ms,
                    "context_window": event.context_window, "prompt_frames": event.prompt_frames,
                })
            elif isinstance(event, ev.AudioOut):
                first = event.frame_index * FRAME_SAMPLES
                out_pcm[first : first + FRAME_SAMPLES] = event.pcm
                done += 1
            elif isinstance(event, ev.TextPiece):
                text_parts.append(event.text)
                _write(out, {"type": "text", "frame": event.frame_index,
                             "time": round(event.frame_index / FRAME_RATE, 3), "text": event.text})
            elif isinstance(event, ev.SpanAccepted):
                spans[event.span_id] = {
                    "type": "span", "span_id": event.span_id, "source": event.source,
                    "text": event.text, "positions": event.tokens, "chunks": [],
                    "truncated": event.truncated,
                }
                if event.truncated:
                    _write(out, {
                        "type": "notice", "span_id": event.span_id,
                        "message": f"span {event.span_id} from {event.source} was truncated: "
                                   f"{event.kept_content_tokens} of "
                                   f"{event.original_content_tokens} tokens kept",
                    })
            elif isinstance(event, ev.SpanChunkInjected):
                spans[event.span_id]["chunks"].append(
                    {"before_frame": event.before_frame, "k": event.k,
                     "prefill_ms": round(event.prefill_ms, 3)})
            elif isinstance(event, ev.SpanInjected):
                _write(out, spans[event.span_id])
            elif isinstance(event, ev.SpanRejected):
                _write(out, {"type": "notice", "span_id": event.span_id,
                             "message": f"span {event.span_id} from {event.source} was not "
                                        f"injected: {event.reason}"})
            elif isinstance(event, ev.EngineError):
                failure.append(event.message)
            elif isinstance(event, ev.EngineStopped):
                _write(out, {"type": "end", "frames": event.frames, "reason": event.reason})
                break
    engine.join(10.0)
    feeder.join(10.0)
    elapsed = time.perf_counter() - start
    if failure:
        raise HeadlessRunError(failure[0])
    if done != frames:
        raise HeadlessRunError(f"the engine returned {done} of {frames} frames")
    write_wav_24k(output_path, out_pcm[: len(pcm)])
    return RunSummary(frames, duration, elapsed, len(spans), "".join(text_parts))
