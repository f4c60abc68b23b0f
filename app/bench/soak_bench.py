"""`python main.py bench soak`: a long live conversation on the tiny model.

A microphone-paced source (quiet noise) feeds a full session for N minutes while spans
are injected every 20 s; reports dropped frames and resident memory over time.
"""

from __future__ import annotations

import resource
import statistics
import threading
import time
from pathlib import Path

import numpy as np

from app.audio.file_source import FileAudioSource
from app.session import CheckpointCache, ConversationSession, SessionStatus
from app.settings.schema import AppSettings, LlmSettings, SpeechModelSettings


def _rss_mb() -> float:
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
        return pages * resource.getpagesize() / 2**20
    except OSError:  # not Linux: peak RSS is the best portable figure
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class _Listener:
    def __init__(self) -> None:
        self.state = ""
        self.frame_ms: list[float] = []
        self.last: SessionStatus | None = None
        self.spans = 0
        self.ready = threading.Event()

    def on_state(self, state: str, detail: str) -> None:
        self.state = state
        if state in ("running", "error", "stopped"):
            self.ready.set()

    def on_entry(self, entry) -> None:
        if entry.kind == "span" and entry.final:
            self.spans += 1

    def on_status(self, status: SessionStatus) -> None:
        self.last = status
        self.frame_ms.append(status.frame_ms)


def run_soak_bench(minutes: float = 10.0, model_id: str = "tiny") -> dict:
    rng = np.random.default_rng(0)
    source = FileAudioSource((0.01 * rng.standard_normal(24000 * 4)).astype(np.float32))
    listener = _Listener()
    settings = AppSettings(speech=SpeechModelSettings(model_id=model_id, device="cpu"),
                           llm=LlmSettings(backend="none"))
    session = ConversationSession(settings, listener, lambda _s: source, CheckpointCache())
    session.start()
    if not listener.ready.wait(300) or listener.state != "running":
        session.stop()
        raise RuntimeError(f"the session did not start ({listener.state})")
    rss = [(0.0, _rss_mb())]
    start = time.monotonic()
    next_span = start + 20.0
    end = start + minutes * 60.0
    while time.monotonic() < end and session.running:
        now = time.monotonic()
        if now >= next_span:
            session.inject_text("Soak test span: the capital of Australia is Canberra.",
                                "soak")
            next_span += 20.0
        if now - start >= len(rss) * 10.0:
            rss.append((round(now - start, 1), _rss_mb()))
        time.sleep(0.2)
    status = listener.last
    session.stop()
    frames = [ms for ms in listener.frame_ms if ms > 0]
    first_minute = [mb for t, mb in rss if t >= 60.0][:1] or [rss[0][1]]
    return {
        "minutes": minutes,
        "model": model_id,
        "frames_played": source.played_count,
        "dropped_frames": status.dropped_frames if status else None,
        "spans_injected": listener.spans,
        "frame_ms_median": round(statistics.median(frames), 3) if frames else None,
        "frame_ms_max": round(max(frames), 3) if frames else None,
        "rss_mb_start": round(rss[0][1], 1),
        "rss_mb_after_1_min": round(first_minute[0], 1),
        "rss_mb_end": round(rss[-1][1], 1),
        "rss_growth_after_1_min_mb": round(rss[-1][1] - first_minute[0], 1),
        "rss_mb_every_10_s": [round(mb, 1) for _, mb in rss],
    }
