"""`python main.py run`: an audio file through the whole engine, as fast as it goes.

Writes the reply audio (the input's duration) and a JSONL transcript: the model's text
pieces with their frame index, and each span with its source and the frame before which
each of its chunks landed, with K.
"""

from __future__ import annotations

import json
import os
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TextIO

import numpy as np

from app.audio_file import read_mono_24k, write_wav_24k
from app.checkpoints.catalog import get_manifest
from app.checkpoints.loader import ensure_built, load_checkpoint
from app.engine import events as ev
from app.engine.device import choose_device
from app.engine.duplex_engine import FRAME_SAMPLES, SAMPLE_RATE, DuplexEngine, EngineOptions
from app.pipeline import ConversationPipeline
from app.settings.schema import LlmSettings
from app.settings.store import field_range

FRAME_RATE = SAMPLE_RATE / FRAME_SAMPLES  # 12.5 Hz


class HeadlessRunError(RuntimeError):
    pass


@dataclass(frozen=True)
class Injection:
    text: str
    at_seconds: float
    source: str = "cli"


@dataclass(frozen=True)
class ConversationConfig:
    """The LLM side of a headless run: ASR of the input, an LLM backend and its tools."""

    asr_model: str | None = None  # STT catalog id (models/stt); None: no ASR
    force_vad: bool = False  # end turns by the VAD even if the STT has an end-of-speech head
    llm: str | None = None  # "ollama", "openai" or None
    llm_host: str | None = None  # Ollama host or OpenAI-compatible base URL
    llm_model: str | None = None
    llm_timeout_s: float = 30.0
    tools: tuple[str, ...] | None = None  # None: every configured tool
    folders: tuple[str, ...] = ()  # local folders the local_search tool may read
    realtime: bool = False  # feed frames at 80 ms, like a microphone
    level_voice: bool = False  # level the input to -24 LUFS before the model and the ASR


@dataclass(frozen=True)
class RunSummary:
    frames: int
    audio_seconds: float
    elapsed_seconds: float
    spans: int
    text: str


def _write(out: TextIO, record: dict) -> None:
    # The file is opened with errors="backslashreplace": a lone surrogate (odd bytes in an
    # argument or a file name) comes out as a JSON \\udcxx escape, never a failed run.
    out.write(json.dumps(record, ensure_ascii=False) + "\n")


def check_output_paths(input_path: Path, outputs: list[Path]) -> None:
    """Fail before the run, not after it: each output must be a file we can create."""
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


def _build_backend(config: ConversationConfig):
    if config.llm == "ollama":
        from app.llm.ollama_backend import OllamaBackend, OllamaSettings

        settings = OllamaSettings(timeout_s=config.llm_timeout_s)
        overrides = {k: v for k, v in (("host", config.llm_host), ("model", config.llm_model))
                     if v}
        return OllamaBackend(replace(settings, **overrides))
    if config.llm == "openai":
        from app.llm.openai_compat_backend import OpenAICompatBackend, OpenAICompatSettings

        if not config.llm_host:
            raise HeadlessRunError("--llm openai needs --llm-host (the server's base URL)")
        return OpenAICompatBackend(OpenAICompatSettings(
            base_url=config.llm_host, model=config.llm_model or "",
            timeout_s=config.llm_timeout_s))
    raise HeadlessRunError(f"unknown LLM backend {config.llm!r} (choose ollama or openai)")


def _build_asr(config: ConversationConfig, device):
    from app.asr.asr_thread import AsrOptions, StreamingAsr
    from app.asr.stt_catalog import ensure_stt_built, get_stt_manifest, load_stt

    manifest = get_stt_manifest(config.asr_model or "")
    folder = ensure_stt_built(manifest)
    stt = load_stt(manifest, folder, device)
    return StreamingAsr(stt, AsrOptions(force_vad=config.force_vad))


def build_pipeline(engine: DuplexEngine, config: ConversationConfig | None, device
                   ) -> ConversationPipeline:
    if config is None:
        return ConversationPipeline(engine)
    asr = _build_asr(config, device) if config.asr_model else None
    leveller = True if config.level_voice else None
    orchestrator = None
    if config.llm:
        from app.orchestrator.orchestrator import Orchestrator, OrchestratorOptions
        from app.orchestrator.retrieval import user_profile
        from app.tools.default_tools import ToolSettings, build_tools

        tools = build_tools(ToolSettings(enabled=config.tools, local_folders=config.folders))
        # About three characters a token: keep answers inside the injector's span budget.
        options = OrchestratorOptions(
            max_span_chars=engine.span_tokenizer.max_tokens * 3,
            retrieval=engine.checkpoint.manifest.retrieval,
            profile=user_profile(engine.options.user_name, engine.options.user_city))
        orchestrator = Orchestrator(_build_backend(config), tools, engine, options)
    return ConversationPipeline(engine, asr, orchestrator, leveller)


def _record(event: object, spans: dict[int, dict]) -> dict | None:
    """The transcript line for an event of the LLM side (or a retrieval event of the
    engine), or None."""
    from app.asr.events import AsrError, AsrFinal
    from app.orchestrator import events as oe

    if isinstance(event, AsrFinal):
        return {"type": "user", "text": event.text, "start": round(event.start_s, 3),
                "end": round(event.end_s, 3), "end_of_turn_by": event.detected_by,
                "detected_at": round(event.detected_at_s, 3)}
    if isinstance(event, AsrError):
        return {"type": "notice", "message": f"speech recognition: {event.message}"}
    if isinstance(event, oe.TurnStarted):
        return {"type": "turn", "turn_id": event.turn_id, "question": event.question,
                "trigger": event.trigger}
    if isinstance(event, oe.ToolCalled):
        return {"type": "tool_call", "turn_id": event.turn_id, "tool": event.tool,
                "arguments": dict(event.arguments), "ok": event.ok, "error": event.error,
                "source": event.source, "chars": event.chars, "truncated": event.truncated}
    if isinstance(event, oe.SpanQueued):
        return {"type": "span_queued", "turn_id": event.turn_id, "span_id": event.span_id,
                "text": event.text, "source": event.source}
    if isinstance(event, oe.TurnLatency):
        return {"type": "latency", **{k: v for k, v in vars(event).items()}}
    if isinstance(event, oe.TurnFailed):
        return {"type": "notice", "turn_id": event.turn_id,
                "message": f"LLM {event.kind}: {event.message}"}
    if isinstance(event, oe.TurnCancelled):
        return {"type": "turn_cancelled", "turn_id": event.turn_id, "reason": event.reason}
    if isinstance(event, oe.LlmStatus) and event.state == "error":
        return {"type": "llm_status", "state": event.state, "message": event.message}
    if isinstance(event, oe.RetrievalQuestion):
        return {"type": "question", "turn_id": event.turn_id, "ret_frame": event.ret_frame,
                "question": event.question, "plan": event.plan, "waited_ms": event.waited_ms}
    if isinstance(event, oe.RetrievalIgnored):
        return {"type": "ret_ignored", "ret_frame": event.ret_frame, "reason": event.reason}
    if isinstance(event, oe.NoSpan):
        return {"type": "no_span", "turn_id": event.turn_id, "ret_frame": event.ret_frame,
                "question": event.question, "reason": event.reason}
    if isinstance(event, oe.RetrievalLate):
        return {"type": "late", "turn_id": event.turn_id, "ret_frame": event.ret_frame,
                "question": event.question, "seconds": event.seconds, "source": event.source,
                "dropped_by": "orchestrator"}
    if isinstance(event, ev.SpanLate):
        return {"type": "late", "span_id": event.span_id, "ret_frame": event.origin_frame,
                "text": event.text, "seconds": event.seconds, "source": event.source,
                "dropped_by": "engine"}
    if isinstance(event, ev.RetToken):
        return {"type": "ret", "frame": event.frame_index,
                "time": round(event.frame_index / FRAME_RATE, 3)}
    if isinstance(event, ev.BlockSlot):
        return {"type": "slot", "span_id": event.span_id, "frame": event.frame_index,
                "positions": event.positions, "prefill_ms": round(event.prefill_ms, 3),
                "step_ms": round(event.step_ms, 3), "total_ms": round(event.total_ms, 3),
                "over_budget": event.over_budget}
    return None


def _close_transcript(out: TextIO, partial: Path, final: Path, spans: dict[int, dict],
                      engine: DuplexEngine, stopped: ev.EngineStopped | None,
                      failure: list[str], done: int, frames: int) -> None:
    """The transcript's last lines, then its final name.

    Spans the input ended in the middle of are recorded with the chunks that did land
    ("complete": false); a span still waiting is a notice. The last line is "end" only when
    every frame came back; otherwise "error" with the reason."""
    try:
        for record in spans.values():
            if record["chunks"]:
                _write(out, record | {"complete": False})
        if stopped is not None and engine.injector.has_pending():
            _write(out, {"type": "notice", "message": "the input ended before every queued "
                         "span was injected"})
        if not failure and stopped is not None and done != frames:
            failure.append(f"the engine returned {done} of {frames} frames")
        if not failure and stopped is None:
            failure.append("the run stopped before the engine did")
        if failure:
            _write(out, {"type": "error", "message": failure[0], "frames": done})
        else:
            assert stopped is not None
            _write(out, {"type": "end", "frames": stopped.frames, "reason": stopped.reason})
    finally:
        out.close()
        os.replace(partial, final)


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
    conversation: ConversationConfig | None = None,
    user_name: str | None = None,
    user_city: str | None = None,
    engine_hook: Callable[[DuplexEngine], None] | None = None,
    ret_at: tuple[float, ...] = (),
) -> RunSummary:
    """`engine_hook` sees the engine before it starts (instrumentation: tests, benchmarks)."""
    from app.checkpoints.loader import parse_dtype

    manifest = get_manifest(model_id)
    check_output_paths(input_path, [output_path, transcript_path])
    if conversation is not None:
        low, high = field_range(LlmSettings, "timeout_s")
        if not low <= conversation.llm_timeout_s <= high:  # NaN fails too
            raise HeadlessRunError(f"--llm-timeout must be from {low:g} to {high:g} seconds")
    pcm = read_mono_24k(input_path)
    duration = len(pcm) / SAMPLE_RATE
    frames = -(-len(pcm) // FRAME_SAMPLES)
    for injection in injections:
        if not 0 <= injection.at_seconds <= duration:
            raise HeadlessRunError(
                f"--at {injection.at_seconds:g} is outside the input (0 to {duration:.2f} s)"
            )
    for seconds in ret_at:
        if not 0 <= seconds <= duration:
            raise HeadlessRunError(
                f"--ret-at {seconds:g} is outside the input (0 to {duration:.2f} s)")
    torch_device = choose_device(device)
    checkpoint = load_checkpoint(
        manifest, ensure_built(manifest, folder), torch_device,
        parse_dtype(dtype) if dtype else None,
    )
    engine = DuplexEngine(
        checkpoint, EngineOptions(seed=seed, chunk_limit=chunk_limit, voice=voice, role=role,
                                  user_name=user_name, user_city=user_city,
                                  forced_ret_frames=frozenset(int(s * FRAME_RATE)
                                                              for s in ret_at))
    )
    if engine_hook is not None:
        engine_hook(engine)
    pipeline = build_pipeline(engine, conversation, torch_device)
    for injection in injections:
        at_frame = int(injection.at_seconds * FRAME_RATE)
        engine.inject(injection.text, injection.source, at_frame=at_frame)

    padded = np.zeros(frames * FRAME_SAMPLES, dtype=np.float32)
    padded[: len(pcm)] = pcm
    failure: list[str] = []
    # A model that asks with <ret> gets its answers within a deadline in conversation time:
    # the LLM's (wall-clock) latency only means the same thing when frames come in real time.
    model_asks = bool(pipeline.orchestrator is not None
                      and pipeline.orchestrator.model_triggered)
    realtime = bool(conversation and conversation.realtime) or model_asks
    stop_feeding = threading.Event()

    def feed() -> None:
        try:
            next_at = time.monotonic()
            for i in range(frames):
                frame = padded[i * FRAME_SAMPLES : (i + 1) * FRAME_SAMPLES]
                if realtime:  # a microphone's pace: a late engine drops frames, as live
                    next_at += FRAME_SAMPLES / SAMPLE_RATE
                    if stop_feeding.wait(max(0.0, next_at - time.monotonic())):
                        return
                    if not pipeline.push_frame(frame, 0.0):
                        failure.append(f"the engine fell behind real time at frame {i}")
                        return
                    continue
                while not pipeline.push_frame(frame, 1.0):
                    if not engine.running or stop_feeding.is_set():
                        return
            pipeline.finish_input(None if not realtime else 10.0)
        except Exception as exc:  # reported through `failure`, never a silent stop
            failure.append(f"feeding the engine failed: {exc}")

    out_pcm = np.zeros(frames * FRAME_SAMPLES, dtype=np.float32)
    start = time.perf_counter()
    pipeline.start()
    feeder = threading.Thread(target=feed, name="file-feeder", daemon=True)
    feeder.start()
    spans: dict[int, dict] = {}
    text_parts: list[str] = []
    done = 0
    landed = 0
    # The transcript is written beside its final name and renamed at the end: a run that
    # fails keeps what it wrote, closed by an "error" line, never an "end" line.
    partial = transcript_path.with_name(f".{transcript_path.name}.partial")
    stopped: ev.EngineStopped | None = None
    out = partial.open("w", encoding="utf-8", errors="backslashreplace")
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise HeadlessRunError(f"the run did not finish within {timeout_s:.0f} s")
            try:
                event = pipeline.events.get(timeout=min(remaining, 1.0))
            except queue.Empty:
                if failure and not feeder.is_alive():
                    break  # the input cannot go on: stop rather than wait for the deadline
                continue
            if isinstance(event, ev.EngineReady):
                _write(out, {
                    "type": "run", "model": event.model_id, "device": event.device,
                    "dtype": event.dtype, "input": str(input_path), "frames": frames,
                    "sample_rate": SAMPLE_RATE, "frame_rate": FRAME_RATE,
                    "chunk_limit": event.chunk_limit, "step_ms": event.step_ms,
                    "context_window": event.context_window,
                    "prompt_frames": event.prompt_frames,
                    "paced": "real time" if realtime else "as fast as it goes",
                    "trigger": manifest.retrieval.trigger if pipeline.orchestrator
                    else None,
                })
            elif isinstance(event, ev.AudioOut):
                first = event.frame_index * FRAME_SAMPLES
                out_pcm[first : first + FRAME_SAMPLES] = event.pcm
                done += 1
            elif isinstance(event, ev.TextPiece):
                text_parts.append(event.text)
                _write(out, {"type": "text", "frame": event.frame_index,
                             "time": round(event.frame_index / FRAME_RATE, 3),
                             "text": event.text})
            elif isinstance(event, ev.SpanAccepted):
                spans[event.span_id] = {
                    "type": "span", "span_id": event.span_id, "source": event.source,
                    "text": event.text, "positions": event.tokens, "chunks": [],
                    "truncated": event.truncated,
                }
                if event.truncated:
                    _write(out, {
                        "type": "notice", "span_id": event.span_id,
                        "message": f"span {event.span_id} from {event.source} was "
                                   f"truncated: {event.kept_content_tokens} of "
                                   f"{event.original_content_tokens} tokens kept",
                    })
            elif isinstance(event, ev.SpanChunkInjected):
                spans[event.span_id]["chunks"].append(
                    {"before_frame": event.before_frame, "k": event.k,
                     "prefill_ms": round(event.prefill_ms, 3)})
            elif isinstance(event, ev.SpanInjected):
                record = spans.pop(event.span_id)
                if event.origin_frame is not None:
                    record["ret_frame"] = event.origin_frame
                    record["latency_from_ret_s"] = round(
                        (event.last_frame - event.origin_frame) / FRAME_RATE, 3)
                landed += 1
                _write(out, record)
            elif isinstance(event, ev.SpanRejected):
                _write(out, {"type": "notice", "span_id": event.span_id,
                             "message": f"span {event.span_id} from {event.source} was "
                                        f"not injected: {event.reason}"})
            elif isinstance(event, ev.EngineError):
                failure.append(event.message)
            elif isinstance(event, ev.EngineStopped):
                stopped = event
                break
            else:
                record = _record(event, spans)
                if record is not None:
                    _write(out, record)
    except BaseException as exc:
        failure.insert(0, str(exc) or type(exc).__name__)
        raise
    finally:
        stop_feeding.set()
        pipeline.stop(10.0)
        feeder.join(10.0)
        _close_transcript(out, partial, transcript_path, spans, engine, stopped, failure,
                          done, frames)
    elapsed = time.perf_counter() - start
    if failure:
        raise HeadlessRunError(failure[0])
    write_wav_24k(output_path, out_pcm[: len(pcm)])
    return RunSummary(frames, duration, elapsed, landed, "".join(text_parts))
