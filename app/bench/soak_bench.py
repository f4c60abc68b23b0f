"""`python main.py bench soak`: a long live conversation on the tiny model.

A full session (app/conversation/session.py, the app's own wiring) runs for N minutes on real audio
devices: a private PulseAudio null sink, whose monitor is the microphone. The user's side
is espeak-ng questions with pauses between them, looped, played into that sink by a second
stream; the model's voice goes there too and comes back as echo, which the app's canceller
removes (a digital loopback). The streaming ASR (tiny STT, turns ended by Silero VAD) hears
every question, the orchestrator asks a stand-in Ollama at the end of each recognised turn,
and its answers are injected as spans. Every 10 s the device counters (LiveAudio.counters())
and the resident memory are sampled (every 10 s by default).
"""

from __future__ import annotations

import os
import resource
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import numpy as np

from app.audio.live_audio import LiveAudio
from app.bench.audio_bench import PrivatePulseAudio, VoicePlayer, espeak
from app.bench.pipeline_bench import STT_MODEL, ensure_built_in_child
from app.conversation.session import CheckpointCache, ConversationSession, SessionStatus
from app.conversation.transcript.entries import TranscriptEntry
from app.frames import SAMPLE_RATE
from app.llm.ollama_standin import OllamaStandIn, ScriptedReply
from app.llm_backends import OLLAMA
from app.settings.schema import AppSettings, LlmSettings, SpeechModelSettings

QUESTIONS = (
    "What is the capital of Australia?",
    "How far is it from Sydney?",
    "What is six times seven?",
    "Tell me something about the weather there.",
)
PAUSE_S = 2.5  # between questions: longer than the VAD's hang, so each is a turn
ANSWER = "Canberra; and six times seven is"  # how every stand-in answer (and its span) starts
SCRIPTED_FIRST_TOKEN_S = 0.02  # the stand-in's waits, chosen here
SCRIPTED_CHUNK_S = 0.002

AudioFactory = Callable[[AppSettings], LiveAudio]

INCLUDES = {
    "load_average_1_min": "the machine's run-queue length when the bench ended (os.getloadavg): "
                          "above the core count, other work competed with the real-time threads",
    "ran_s": "seconds the conversation ran once the session was up (longer than `minutes` "
             "only while waiting for `until_spans`)",
    "conversation.user_turns_recognised": "final user utterances the ASR ended (end of turn by "
                                          "the VAD) and the transcript showed",
    "conversation.llm_turns_started": "turns the orchestrator started: requests the stand-in "
                                      "LLM got that end with the user's words",
    "conversation.llm_requests": "every request the stand-in got (a turn asks twice: once "
                                 "for the tool call, once with its result)",
    "conversation.spans_from_turns": "spans holding the stand-in's answer to a recognised turn "
                                     "that landed in the engine (span entries with a landing "
                                     "frame)",
    "conversation.spans_not_landed": "what the transcript says of answers' spans that did not "
                                     "land (still queued at the end, dropped, refused)",
    "conversation.warnings": "the transcript's warning and error notices (the first 20): a "
                             "lost device, a failed turn",
    "conversation.user_phrases_played": "questions the user's stream played (loop count)",
    "audio_counters_over_time": "LiveAudio.counters() read from the running device streams "
                                "every `sample_every_s`, with `t_s` seconds since the start",
    "audio_counters_end": "the last counters() read before the session stopped",
    "dropped_frames": "the session's status: audio frames the device layer dropped plus "
                      "frames the model never heard (a full queue on their way)",
    "asr_dropped_frames": "the session's status: frames the speech recognizer never heard "
                          "(its queue was full)",
    "frame_ms_median": "the engine's full-frame time (encode, step, decode, any prefill) as "
                       "the status bar shows it, over the status updates (every 0.2 s)",
    "rss_mb_over_time": "resident memory of this process (all threads: engine, ASR, audio, "
                         "the stand-in server)",
    "rss_growth_after_1_min_mb": "rss at the end minus rss 1 minute in (0 for shorter runs)",
}


def _rss_mb() -> float:
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
        return pages * resource.getpagesize() / 2**20
    except OSError:  # not Linux: peak RSS is the best portable figure
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _script(body: dict) -> ScriptedReply:
    last = body["messages"][-1]
    if last["role"] == "tool":
        return ScriptedReply(content=f"{ANSWER} {last['content'][:20]}.",
                             chunk_delay_s=SCRIPTED_CHUNK_S)
    return ScriptedReply(tool_calls=[{"name": "calculator", "arguments": {"expression": "6*7"}}],
                         first_token_delay_s=SCRIPTED_FIRST_TOKEN_S)


def user_loop() -> np.ndarray:
    """The questions, each followed by a pause: [n] float32 at 24 kHz, played looped."""
    pause = np.zeros(int(PAUSE_S * SAMPLE_RATE), dtype=np.float32)
    parts = []
    for text in QUESTIONS:
        voice = espeak(text, words_per_minute=150)
        if voice is None:
            raise RuntimeError("the soak's user speaks with espeak-ng: install it "
                               "(apt-get install espeak-ng)")
        parts += [voice, pause]
    return np.concatenate(parts)


def _live_audio(settings: AppSettings) -> LiveAudio:
    """What the desktop app opens (app.ui.app), without importing Qt."""
    audio = settings.audio
    return LiveAudio(input_device=audio.input_device, output_device=audio.output_device,
                     echo_mode=audio.echo_mode)


class _Listener:
    """The session's listener: its states, the transcript (latest entry per key), status."""

    def __init__(self) -> None:
        self.states: list[str] = []
        self.entries: dict[tuple, TranscriptEntry] = {}
        self.frame_ms: list[float] = []
        self.last: SessionStatus | None = None
        self.ready = threading.Event()
        self._lock = threading.Lock()

    def on_state(self, state: str, detail: str) -> None:
        self.states.append(state)
        if state in ("running", "paused", "error", "stopped", "model_missing"):
            self.ready.set()

    def on_entry(self, entry: TranscriptEntry) -> None:
        with self._lock:
            self.entries[entry.key] = entry

    def on_status(self, status: SessionStatus) -> None:
        self.last = status
        if status.frame_ms > 0:
            self.frame_ms.append(status.frame_ms)

    def conversation(self) -> dict:
        with self._lock:
            entries = list(self.entries.values())
        users = [e for e in entries if e.kind == "user" and e.final
                 and e.detail.startswith("end of turn")]
        # Only an answer to a recognised turn carries the stand-in's words.
        answers = [e for e in entries if e.kind == "span" and e.text.startswith(ANSWER)]
        landed = [e for e in answers if e.landed_frame is not None]
        notices = [e for e in entries if e.kind == "notice" and e.detail in ("warning", "error")]
        failed = [e for e in notices if e.text.startswith("The LLM could not answer")]
        return {"user_turns_recognised": len(users), "spans_from_turns": len(landed),
                "spans_not_landed": sorted({e.detail for e in answers
                                            if e.landed_frame is None}),
                "turn_failures": len(failed),
                "warnings": [e.text for e in notices[:20]]}


def _llm_requests(requests: list[dict]) -> dict:
    """What the stand-in was asked: a turn's first request ends with the user's words, its
    second (after the tool ran) with the tool's result."""
    last = [body["messages"][-1]["role"] for body in requests if body.get("messages")]
    return {"llm_turns_started": last.count("user"), "llm_requests": len(requests)}


def _settings(model_id: str, llm_url: str) -> AppSettings:
    return AppSettings(
        speech=SpeechModelSettings(model_id=model_id, device="cpu"),
        llm=LlmSettings(backend=OLLAMA, host=llm_url, model="standin:latest", timeout_s=10.0,
                        tools_enabled=True, tools=("calculator",), stt_model=STT_MODEL,
                        end_of_turn="vad"),
    )


def run_soak_bench(minutes: float = 10.0, model_id: str = "tiny",
                   audio_factory: AudioFactory = _live_audio,
                   sample_every_s: float = 10.0, until_spans: int = 0,
                   give_up_after_minutes: float | None = None) -> dict:
    """`until_spans`: after `minutes`, go on until that many spans from recognised turns
    have landed (a smoke run on a busy machine), but not past `give_up_after_minutes`."""
    ensure_built_in_child(model_id)
    ensure_built_in_child(STT_MODEL)
    loop = user_loop()
    opened: list[LiveAudio] = []  # the devices the session opened, newest last

    def open_audio(settings: AppSettings) -> LiveAudio:
        audio = audio_factory(settings)
        opened.append(audio)
        return audio

    listener = _Listener()
    samples: list[dict] = []
    rss: list[tuple[float, float]] = []
    with PrivatePulseAudio(), OllamaStandIn(script=_script) as standin:
        session = ConversationSession(_settings(model_id, standin.url), listener, open_audio,
                                      CheckpointCache())
        user = VoicePlayer(loop, loop=True)
        session.start()
        try:
            if not listener.ready.wait(300) or listener.states[-1] != "running":
                raise RuntimeError(f"the session did not start ({listener.states})")
            user.start()
            start = time.monotonic()
            end = start + minutes * 60.0
            give_up = start + max(minutes, give_up_after_minutes or minutes) * 60.0
            while session.running:
                now = time.monotonic()
                if now - start >= len(rss) * sample_every_s:
                    t = round(now - start, 1)
                    rss.append((t, _rss_mb()))
                    samples.append({"t_s": t, **opened[-1].counters()})
                if now >= end and (
                        now >= give_up
                        or listener.conversation()["spans_from_turns"] >= until_spans):
                    break
                time.sleep(0.2)
            ran_s = round(time.monotonic() - start, 1)
        finally:
            user.stop()
            counters_end = opened[-1].counters() if opened else None
            session.stop()
            asked = list(standin.requests)
    status = listener.last
    if not rss:
        raise RuntimeError(f"the session ended before the soak began ({listener.states})")
    first_minute = [mb for t, mb in rss if t >= 60.0][:1] or [rss[0][1]]
    return {
        "minutes": minutes,
        "ran_s": ran_s,
        "model": model_id,
        "parts": {
            "speech model": f"{model_id}: the real engine code with random weights "
                            "(its voice is noise-like)",
            "audio": "real PortAudio streams (LiveAudio, as the app opens them) on a private "
                     "PulseAudio null sink; its monitor is the microphone: a digital loopback",
            "user": "stand-in: espeak-ng questions with pauses, looped, played into the sink",
            "echo": "the model's voice returns from the sink and the app's canceller (WebRTC "
                    "AEC3) removes it",
            "asr": f"{STT_MODEL} (random weights: its words are not the questions), turns "
                   "ended by the real Silero VAD",
            "llm": "stand-in Ollama server (app/llm/ollama_standin.py, scripted answers and "
                   f"waits: {SCRIPTED_FIRST_TOKEN_S * 1000:g} ms first token, "
                   f"{SCRIPTED_CHUNK_S * 1000:g} ms per chunk) reached through the real "
                   "ollama client; the calculator tool is real",
        },
        "conversation": {**listener.conversation(), **_llm_requests(asked),
                         "user_phrases_played": round(user.played_samples / loop.shape[0], 2)},
        "states": listener.states,
        "dropped_frames": status.dropped_frames if status else None,
        "asr_dropped_frames": status.asr_dropped_frames if status else None,
        "frame_ms_median": (round(statistics.median(listener.frame_ms), 3)
                            if listener.frame_ms else None),
        "frame_ms_max": round(max(listener.frame_ms), 3) if listener.frame_ms else None,
        "audio_counters_end": counters_end,
        "sample_every_s": sample_every_s,
        "audio_counters_over_time": samples,
        "session_status_end": asdict(status) if status else None,
        "rss_mb_start": round(rss[0][1], 1),
        "rss_mb_after_1_min": round(first_minute[0], 1),
        "rss_mb_end": round(rss[-1][1], 1),
        "rss_growth_after_1_min_mb": round(rss[-1][1] - first_minute[0], 1),
        "rss_mb_over_time": [round(mb, 1) for _, mb in rss],
        "load_average_1_min": round(os.getloadavg()[0], 2),
        "includes": INCLUDES,
    }
