"""`python main.py bench pipeline`: per-stage latency of spoken turns, end to end.

A spoken question (espeak-ng) goes in as a microphone would deliver it: 80 ms frames on a
fixed real-time schedule, followed by room quiet. The whole conversation pipeline hears it:
the tiny engine in real time, the streaming ASR (the tiny STT, its turns ended by Silero
VAD after the configured hang time) and the orchestrator, which asks a local stand-in
Ollama through the real `ollama` client; each turn makes one real tool call (the
calculator) before the stand-in answers. A turn's clock starts at the last sample of the
spoken question, on the feeder's schedule, and stops at the first audio frame the engine
made after the answer's span landed, so the headline includes end-of-turn detection.
"""

from __future__ import annotations

import contextlib
import os
import queue
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from app.asr.events import AsrFinal
from app.asr.vad import VadOptions
from app.checkpoints.catalog import get_manifest
from app.conversation import assembly
from app.conversation.config import ConversationConfig
from app.conversation.pipeline import ConversationPipeline
from app.engine.events import AudioOut, EngineReady, SpanInjected
from app.frames import FRAME_MS, FRAME_SAMPLES, SAMPLE_RATE
from app.llm.ollama_standin import OllamaStandIn, ScriptedReply
from app.llm_backends import OLLAMA
from app.orchestrator.events import SpanQueued, TurnCancelled, TurnFailed, TurnLatency
from app.paths import REPO_ROOT

QUESTION = "What is six times seven?"
STT_MODEL = "tiny-stt"
QUIET_RMS = 0.003  # room noise between questions (about -50 dBFS)
# The stand-in's scripted waits: not a model's speed, chosen here.
SCRIPTED_FIRST_TOKEN_S = 0.02  # before the tool-call reply
SCRIPTED_CHUNK_S = 0.002  # between chunks of the answer

# End-of-turn turns only (a mid-turn question would start before the speech ends), and no
# "the user spoke again": the tiny STT has random weights, so it babbles words on room noise
# after every question, which would cancel the turn being measured.
ORCHESTRATOR_OPTIONS: dict[str, Any] = {"mid_turn": False, "min_words_to_cancel": 10**6}

STAGES = (
    "end_of_speech_to_turn_ms",
    "turn_to_first_token_ms",
    "first_token_to_span_ready_ms",
    "span_ready_to_injected_ms",
    "injected_to_first_audio_ms",
    "end_of_speech_to_first_audio_ms",
)

INCLUDES = {
    "load_average_1_min": "the machine's run-queue length when the bench ended (os.getloadavg): "
                          "above the core count, other work competed with the real-time threads",
    "stages_ms.end_of_speech_to_turn_ms":
        "wall clock from the last sample of the spoken question (on the feeder's real-time "
        "schedule) to the orchestrator starting the turn: the VAD hang time, the 80 ms "
        "framing and 32 ms VAD chunks, how far the ASR thread runs behind real time, the "
        "STT flush at the end of the turn, and the queue hops to the orchestrator",
    "stages_ms.turn_to_first_token_ms":
        "the orchestrator's clock: the HTTP request to the stand-in Ollama through the real "
        "ollama client, and the stand-in's scripted first-token wait (llm.scripted_delays_ms)",
    "stages_ms.first_token_to_span_ready_ms":
        "the rest of the LLM turn: the tool-call reply, the real calculator tool, the second "
        "request and the streamed answer with its scripted chunk waits",
    "stages_ms.span_ready_to_injected_ms":
        "the span waiting for the engine's next frame boundary and its chunked prefill "
        "(target: within one 80 ms frame)",
    "stages_ms.injected_to_first_audio_ms":
        "from the span's last chunk landing to the engine's next audio frame",
    "stages_ms.end_of_speech_to_first_audio_ms":
        "the headline, wall clock: the last sample of the spoken question to the first audio "
        "frame made after the span landed; detection included (the sum of the stages above). "
        "Excludes the sound card's output latency (see `bench audio-latency`)",
    "end_of_turn.vad_hang_ms": "the configured silence that ends a turn (VadOptions.hang_s)",
    "end_of_turn.decided_after_speech_ms":
        "audio time from the true end of the question to the VAD's decision (the hang, "
        "rounded to VAD chunks, plus the VAD's own lag on the speech's tail)",
    "end_of_turn.asr_behind_real_time_ms":
        "wall time the bench saw the final transcript minus the wall time the decided-on "
        "audio was spoken: the ASR thread's processing lag plus one queue hop",
    "end_of_turn.asr_dropped_frames": "frames the ASR's full queue refused (times above "
                                      "assume none)",
    "span_injected_within_one_frame":
        "share of turns whose span_ready_to_injected_ms is at most one frame (80 ms)",
    "chunk_limit": "positions the engine measured it can prefill in one frame on this device",
    "per_turn_ms": "the same stages for each completed turn, in order",
    "speech.seconds": "length of the spoken question, leading and trailing silence trimmed",
}


@dataclass(frozen=True)
class _Spoken:
    """A question the feeder finished saying: wall time (monotonic) of its last sample, and
    the same moment in the ASR's audio time (seconds since the first frame fed)."""

    end_wall_s: float
    end_audio_s: float


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def _script(body: dict) -> ScriptedReply:
    last = body["messages"][-1]
    if last["role"] == "tool":
        return ScriptedReply(content=f"The result is {last['content'][:40]}.",
                             chunk_delay_s=SCRIPTED_CHUNK_S)
    return ScriptedReply(tool_calls=[{"name": "calculator", "arguments": {"expression": "6*7"}}],
                         first_token_delay_s=SCRIPTED_FIRST_TOKEN_S)


def spoken(text: str) -> np.ndarray:
    """`text` spoken by espeak-ng, silence trimmed: [n] float32 at 24 kHz."""
    from app.bench.audio_bench import espeak

    pcm = espeak(text, words_per_minute=150)
    if pcm is None:
        raise RuntimeError("the bench speaks its questions with espeak-ng: install it "
                           "(apt-get install espeak-ng)")
    return pcm


def ensure_built_in_child(model_id: str) -> None:
    """Build a tiny checkpoint with `python main.py build` in a child process when it is not
    on disk: SentencePiece training leaves threads that slow torch in the process it ran in."""
    from app.asr.stt_catalog import get_stt_manifest

    if model_id == STT_MODEL:
        needed = [get_stt_manifest(model_id).default_folder() / "config.json"]
    else:
        manifest = get_manifest(model_id)
        if manifest.source_kind != "built":
            return
        folder = manifest.default_folder()
        needed = [folder / name for name in manifest.files.values()] or [folder / "config.json"]
    if all(path.is_file() for path in needed):
        return
    subprocess.run([sys.executable, str(REPO_ROOT / "main.py"), "build", model_id],
                   cwd=REPO_ROOT, env=dict(os.environ), check=True, capture_output=True,
                   timeout=600)


class _RealtimeMicrophone:
    """A frame every 80 ms on a fixed schedule, like a sound card: room quiet, or the next
    question handed to `say`. Frame k holds the samples spoken from k * 80 ms on and is
    delivered once its last sample was (t0 + (k + 1) * 80 ms)."""

    def __init__(self, pipeline: ConversationPipeline) -> None:
        self._pipeline = pipeline
        self._to_say: queue.SimpleQueue[np.ndarray] = queue.SimpleQueue()
        self.said: queue.SimpleQueue[_Spoken] = queue.SimpleQueue()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-microphone", daemon=True)
        self.t0 = 0.0  # monotonic time of sample 0

    def start(self) -> None:
        self.t0 = time.monotonic()
        self._thread.start()

    def say(self, pcm: np.ndarray) -> None:
        self._to_say.put(pcm)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5.0)

    def _run(self) -> None:
        rng = np.random.default_rng(0)
        period = FRAME_SAMPLES / SAMPLE_RATE
        speech: np.ndarray | None = None
        speech_start = 0  # sample index where the current question began
        frame_index = 0
        while not self._stop.is_set():
            first = frame_index * FRAME_SAMPLES
            frame = (QUIET_RMS * rng.standard_normal(FRAME_SAMPLES)).astype(np.float32)
            if speech is None:
                with contextlib.suppress(queue.Empty):
                    speech, speech_start = self._to_say.get_nowait(), first
            if speech is not None:
                part = speech[first - speech_start : first - speech_start + FRAME_SAMPLES]
                frame[: part.shape[0]] += part
                end = speech_start + speech.shape[0]
                if end <= first + FRAME_SAMPLES:
                    self.said.put(_Spoken(self.t0 + end / SAMPLE_RATE, end / SAMPLE_RATE))
                    speech = None
            frame_index += 1
            self._stop.wait(max(0.0, self.t0 + frame_index * period - time.monotonic()))
            self._pipeline.push_frame(frame, 0.0)


class _TurnWatch:
    """Follows the pipeline's events for one turn: its span, where it landed, the first
    audio frame after it (the orchestrator's own rule), and the transcript's arrival."""

    def __init__(self) -> None:
        self.latency: TurnLatency | None = None
        self.failure: str | None = None
        self.final: AsrFinal | None = None
        self.final_seen_s: float | None = None
        self._span_id: int | None = None
        self._landed: dict[int, int] = {}  # span id -> the frame it landed before
        self._first_audio: dict[int, float] = {}  # span id -> monotonic time
        self.seen: dict[str, int] = {}  # event kinds seen, for a turn that timed out

    def on(self, event: object) -> None:
        self.seen[type(event).__name__] = self.seen.get(type(event).__name__, 0) + 1
        if isinstance(event, AsrFinal) and self.final is None:
            self.final, self.final_seen_s = event, time.monotonic()
        elif isinstance(event, SpanQueued):
            self._span_id = event.span_id
        elif isinstance(event, SpanInjected):
            self._landed[event.span_id] = event.last_frame
        elif isinstance(event, AudioOut):
            for span_id, frame in list(self._landed.items()):
                if event.frame_index >= frame:
                    self._first_audio.setdefault(span_id, event.monotonic_s)
                    del self._landed[span_id]
        elif isinstance(event, TurnLatency):
            self.latency = event
        elif isinstance(event, TurnFailed):
            self.failure = event.message
        elif isinstance(event, TurnCancelled):
            self.failure = f"cancelled: {event.reason}"

    def stuck_at(self) -> str:
        """Where a turn that timed out got to."""
        if self.final is None:
            return "no end of turn was detected"
        if not self.final.text.strip():
            return "the end of turn came with no words (no turn is asked)"
        if self.latency is None:
            return f"no answer landed (heard {self.final.text!r}; events {self.seen})"
        return "no audio frame after the span landed"

    @property
    def done(self) -> bool:
        return self.failure is not None or self.latency is not None and (
            self.latency.end_of_speech_to_first_audio_ms is None or self.first_audio is not None)

    @property
    def first_audio(self) -> float | None:
        return None if self._span_id is None else self._first_audio.get(self._span_id)


def _turn_stages(watch: _TurnWatch, said: _Spoken) -> dict[str, float | None]:
    """The orchestrator's stages, with detection and the headline on the wall clock."""
    lat = watch.latency
    assert lat is not None
    stages: dict[str, float | None] = {name: getattr(lat, name) for name in STAGES}
    first_audio = watch.first_audio
    if (first_audio is None or lat.end_of_speech_to_first_audio_ms is None
            or lat.end_of_speech_to_turn_ms is None):
        stages["end_of_speech_to_turn_ms"] = stages["end_of_speech_to_first_audio_ms"] = None
        return stages
    # The orchestrator's own stages from its turn start to first audio are exact; only its
    # idea of when speech ended (the transcript's arrival minus the hang in audio time)
    # misses how far the ASR runs behind real time. The bench knows when speech ended.
    turn_to_audio_s = (lat.end_of_speech_to_first_audio_ms - lat.end_of_speech_to_turn_ms) / 1e3
    headline = (first_audio - said.end_wall_s) * 1000.0
    stages["end_of_speech_to_first_audio_ms"] = round(headline, 3)
    stages["end_of_speech_to_turn_ms"] = round(headline - turn_to_audio_s * 1000.0, 3)
    return stages


def _summary(values: list[float]) -> dict:
    return {"median": round(statistics.median(values), 3),
            "p95": round(_percentile(values, 0.95), 3), "n": len(values)}


def _run_turn(pipeline: ConversationPipeline, mic: _RealtimeMicrophone, question: np.ndarray,
              timeout_s: float) -> tuple[_TurnWatch, _Spoken | None]:
    watch = _TurnWatch()
    said: _Spoken | None = None
    mic.say(question)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not (watch.done and said is not None):
        if said is None:
            with contextlib.suppress(queue.Empty):
                said = mic.said.get_nowait()
        try:
            watch.on(pipeline.events.get(timeout=0.05))
        except queue.Empty:
            continue
    return watch, said


def run_pipeline_bench(model_id: str = "tiny", turns: int = 20, device: str | None = None,
                       turn_timeout_s: float = 20.0, vad_hang_s: float = 0.6) -> dict:
    ensure_built_in_child(model_id)
    ensure_built_in_child(STT_MODEL)
    # The stand-in's address is known once it runs: the LLM side is filled in below.
    config = ConversationConfig(model_id=model_id, device=device or "auto", stt_model=STT_MODEL,
                                end_of_turn="vad", backend=OLLAMA, model="standin:latest",
                                timeout_s=10.0, tools=("calculator",))
    checkpoint = assembly.load_speech_model(config)
    torch_device = checkpoint.device
    vad = VadOptions(hang_s=vad_hang_s)
    asr = assembly.build_asr(config, torch_device, vad=vad)
    assert asr is not None
    question = spoken(QUESTION)
    rows: list[dict[str, float | None]] = []
    decided_after: list[float] = []
    asr_lag: list[float] = []
    failures: list[str] = []
    with OllamaStandIn(script=_script) as standin:
        config = replace(config, host=standin.url)
        engine = assembly.build_engine(checkpoint, assembly.engine_options(config, seed=0))
        orchestrator = assembly.build_orchestrator(
            config, engine, assembly.build_backend(config), assembly.build_tools(config),
            **ORCHESTRATOR_OPTIONS)
        pipeline = assembly.join_stages(engine, config, asr, orchestrator)
        mic = _RealtimeMicrophone(pipeline)
        pipeline.start()
        ready: EngineReady | None = None
        try:
            ready = _wait_ready(pipeline, turn_timeout_s * 4)
            if not asr.ready.wait(turn_timeout_s * 4):
                raise TimeoutError("the ASR was not ready")
            mic.start()  # only now: audio time 0 is the first frame the ASR hears
            for turn in range(turns):
                watch, said = _run_turn(pipeline, mic, question, turn_timeout_s)
                if watch.failure is not None:
                    failures.append(f"turn {turn}: {watch.failure}")
                elif said is None or watch.latency is None:
                    failures.append(f"turn {turn} timed out: {watch.stuck_at()}")
                else:
                    rows.append(_turn_stages(watch, said))
                if (said is not None and watch.final is not None
                        and watch.final_seen_s is not None):  # set together
                    decided_after.append((watch.final.detected_at_s - said.end_audio_s) * 1e3)
                    asr_lag.append((watch.final_seen_s - mic.t0
                                    - watch.final.detected_at_s) * 1e3)
        finally:
            mic.stop()
            pipeline.stop()
    stages = {}
    for name in STAGES:
        values = [value for row in rows if (value := row[name]) is not None]
        if values:
            stages[name] = _summary(values)
    injected = [row["span_ready_to_injected_ms"] for row in rows
                if row["span_ready_to_injected_ms"] is not None]
    return {
        "model": model_id,
        "device": str(torch_device),
        "turns": turns,
        "completed": len(rows),
        "failures": failures,
        "chunk_limit": ready.chunk_limit if ready else None,
        "stages_ms": stages,
        "per_turn_ms": rows,
        "span_injected_within_one_frame": (
            sum(v <= FRAME_MS for v in injected) / len(injected) if injected else None),
        "end_of_turn": {
            "detector": f"Silero VAD in the ASR thread (StreamingAsr, force_vad) on {STT_MODEL}",
            "vad_hang_ms": round(vad.hang_s * 1000.0, 3),
            "decided_after_speech_ms": _summary(decided_after) if decided_after else None,
            "asr_behind_real_time_ms": _summary(asr_lag) if asr_lag else None,
            "asr_dropped_frames": asr.dropped_frames,
            "orchestrator": "turns start at the end of a turn only (mid_turn off) and are never "
                            "cancelled by more words (the random-weight STT babbles on noise)",
        },
        "speech": {"source": "espeak-ng, fed as 80 ms frames on a real-time schedule, room "
                             f"noise at {QUIET_RMS} RMS between questions",
                   "question": QUESTION,
                   "seconds": round(question.shape[0] / SAMPLE_RATE, 3)},
        "llm": {
            "server": "stand-in (app/llm/ollama_standin.py): a scripted local server speaking "
                      "Ollama's wire protocol, not a model; reached through the real ollama "
                      "client",
            "scripted_delays_ms": {"first_token_of_the_tool_call_reply":
                                   SCRIPTED_FIRST_TOKEN_S * 1000.0,
                                   "between_chunks_of_the_answer": SCRIPTED_CHUNK_S * 1000.0},
            "tool": "calculator (real)",
        },
        "load_average_1_min": round(os.getloadavg()[0], 2),
        "includes": INCLUDES,
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
