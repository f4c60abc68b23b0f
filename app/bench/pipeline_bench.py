"""`python main.py bench pipeline`: per-stage latency of scripted turns, end to end.

The tiny engine runs in real time (a frame every 80 ms), the orchestrator talks to a local
stand-in Ollama server through the real `ollama` client, and each scripted turn makes one
tool call before answering. A turn starts when its end of turn is reported (no ASR: the
user's words are scripted) and ends with the first audio frame after its span landed.
"""

from __future__ import annotations

import queue
import statistics
import threading
import time

import numpy as np

from app.asr.events import AsrFinal
from app.checkpoints.catalog import get_manifest
from app.checkpoints.loader import ensure_built, load_checkpoint
from app.engine.device import choose_device
from app.engine.duplex_engine import FRAME_SAMPLES, DuplexEngine, EngineOptions
from app.engine.events import EngineReady
from app.engine.frame_budget import FRAME_MS
from app.llm.ollama_backend import OllamaBackend, OllamaSettings
from app.llm.ollama_standin import OllamaStandIn, ScriptedReply
from app.orchestrator.events import TurnFailed, TurnLatency
from app.orchestrator.orchestrator import Orchestrator
from app.pipeline import ConversationPipeline
from app.tools.base import ToolRegistry

STAGES = (
    "end_of_speech_to_turn_ms",
    "turn_to_first_token_ms",
    "first_token_to_span_ready_ms",
    "span_ready_to_injected_ms",
    "injected_to_first_audio_ms",
    "end_of_speech_to_first_audio_ms",
)


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def _script(body: dict) -> ScriptedReply:
    last = body["messages"][-1]
    if last["role"] == "tool":
        return ScriptedReply(content=f"The result is {last['content'][:40]}.", chunk_delay_s=0.002)
    return ScriptedReply(tool_calls=[{"name": "calculator", "arguments": {"expression": "6*7"}}],
                         first_token_delay_s=0.02)


def _tools() -> ToolRegistry:
    from app.tools.calculator import CalculatorTool

    return ToolRegistry([CalculatorTool()])


def run_pipeline_bench(model_id: str = "tiny", turns: int = 20, device: str | None = None,
                       turn_timeout_s: float = 15.0) -> dict:
    manifest = get_manifest(model_id)
    torch_device = choose_device(device)
    checkpoint = load_checkpoint(manifest, ensure_built(manifest), torch_device)
    with OllamaStandIn(script=_script) as standin:
        backend = OllamaBackend(OllamaSettings(host=standin.url, model="standin:latest",
                                               timeout_s=10.0))
        engine = DuplexEngine(checkpoint, EngineOptions(seed=0))
        orchestrator = Orchestrator(backend, _tools(), engine)
        pipeline = ConversationPipeline(engine, None, orchestrator)
        stop = threading.Event()
        feeder = threading.Thread(target=_feed_realtime, args=(pipeline, stop), daemon=True)
        pipeline.start()
        latencies: list[TurnLatency] = []
        failures: list[str] = []
        ready: EngineReady | None = None
        try:
            feeder.start()
            ready = _wait_ready(pipeline, turn_timeout_s * 4)
            for turn in range(turns):
                audio_s = 1.0 + 3.0 * turn
                orchestrator.on_asr_event(
                    AsrFinal(f"What is six times seven, take {turn}?", audio_s - 1.0, audio_s,
                             detected_by="vad", detected_at_s=audio_s))
                deadline = time.monotonic() + turn_timeout_s
                while time.monotonic() < deadline:
                    try:
                        event = pipeline.events.get(timeout=0.1)
                    except queue.Empty:
                        continue
                    if isinstance(event, TurnLatency):
                        latencies.append(event)
                        break
                    elif isinstance(event, TurnFailed):
                        failures.append(event.message)
                        break
                else:
                    failures.append(f"turn {turn} timed out")
        finally:
            stop.set()
            feeder.join(5.0)
            pipeline.stop()
    stages = {}
    for name in STAGES:
        values = [getattr(lat, name) for lat in latencies if getattr(lat, name) is not None]
        if values:
            stages[name] = {"median": round(statistics.median(values), 3),
                            "p95": round(_percentile(values, 0.95), 3), "n": len(values)}
    injected = [lat.span_ready_to_injected_ms for lat in latencies
                if lat.span_ready_to_injected_ms is not None]
    return {
        "model": model_id,
        "device": str(torch_device),
        "turns": turns,
        "completed": len(latencies),
        "failures": failures,
        "chunk_limit": ready.chunk_limit if ready else None,
        "stages_ms": stages,
        "span_injected_within_one_frame": (
            sum(v <= FRAME_MS for v in injected) / len(injected) if injected else None),
    }


def _wait_ready(pipeline: ConversationPipeline, timeout_s: float) -> EngineReady:
    """Turns start once the engine has warmed up and measured its chunk budget."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            event = pipeline.events.get(timeout=0.1)
        except queue.Empty:
            continue
        if isinstance(event, EngineReady):
            return event
    raise TimeoutError(f"the engine was not ready within {timeout_s:.0f} s")


def _feed_realtime(pipeline: ConversationPipeline, stop: threading.Event) -> None:
    """A frame of quiet noise every 80 ms, on a fixed schedule (like a sound card)."""
    rng = np.random.default_rng(0)
    period = FRAME_SAMPLES / 24000
    next_at = time.monotonic()
    while not stop.is_set():
        pipeline.push_frame((0.01 * rng.standard_normal(FRAME_SAMPLES)).astype(np.float32), 0.0)
        next_at += period
        stop.wait(max(0.0, next_at - time.monotonic()))
