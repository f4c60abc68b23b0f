"""Counters for `/metrics`, in Prometheus' text exposition format (written by hand: a few
counters and one histogram do not need a client library).

Updated from the server's event loop only, so no lock.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence

from app.frames import FRAME_MS

# Engine time per frame, milliseconds: the 80 ms frame and its fractions, then overruns.
FRAME_MS_BUCKETS = (5.0, 10.0, 20.0, 40.0, 60.0, 80.0, 120.0, 200.0, 500.0)
PREFIX = "contextspan"


class ServerMetrics:
    def __init__(self) -> None:
        self.started = time.monotonic()
        self.sessions: Counter[str] = Counter()  # protocol -> conversations started
        self.sessions_active = 0
        self.frames = 0
        self.late_frames = 0  # engine time over the 80 ms frame
        self._frame_buckets = [0] * len(FRAME_MS_BUCKETS)
        self._frame_ms_sum = 0.0
        self.spans: Counter[str] = Counter()  # outcome -> spans
        self.busy = 0
        self.unauthorized = 0
        self.refused: Counter[str] = Counter()  # stage -> client messages refused
        self.closed: Counter[str] = Counter()  # why connections ended
        self.bytes: Counter[str] = Counter()  # "in" / "out" -> wire bytes

    def observe_frame(self, frame_ms: float) -> None:
        self.frames += 1
        self._frame_ms_sum += frame_ms
        if frame_ms > FRAME_MS:
            self.late_frames += 1
        for i, bound in enumerate(FRAME_MS_BUCKETS):
            if frame_ms <= bound:
                self._frame_buckets[i] += 1
                break

    def render(self, busy: bool) -> str:
        lines: list[str] = []

        def metric(name: str, kind: str, help_text: str,
                   samples: Sequence[tuple[str, float]]) -> None:
            lines.append(f"# HELP {PREFIX}_{name} {help_text}")
            lines.append(f"# TYPE {PREFIX}_{name} {kind}")
            for suffix_labels, value in samples:
                lines.append(f"{PREFIX}_{name}{suffix_labels} {value:g}")

        metric("sessions_total", "counter", "Conversations started, by protocol.",
               [(f'{{protocol="{p}"}}', n) for p, n in sorted(self.sessions.items())]
               or [("", 0)])
        metric("sessions_active", "gauge", "Conversations holding an engine now.",
               [("", self.sessions_active)])
        metric("engine_busy", "gauge", "1 while the engine holds a conversation.",
               [("", int(busy))])
        cumulative = 0
        samples: list[tuple[str, float]] = []
        for bound, count in zip(FRAME_MS_BUCKETS, self._frame_buckets, strict=True):
            cumulative += count
            samples.append((f'_bucket{{le="{bound:g}"}}', cumulative))
        samples += [('_bucket{le="+Inf"}', self.frames), ("_sum", round(self._frame_ms_sum, 3)),
                    ("_count", self.frames)]
        metric("frame_ms", "histogram", "Engine time per 80 ms frame, spans included.",
               samples)
        metric("late_frames_total", "counter",
               f"Frames whose engine time exceeded the {FRAME_MS:g} ms frame.",
               [("", self.late_frames)])
        metric("spans_total", "counter", "Spans by outcome (injected, rejected, late).",
               [(f'{{outcome="{o}"}}', n) for o, n in sorted(self.spans.items())]
               or [("", 0)])
        metric("busy_total", "counter", "Connections answered busy.", [("", self.busy)])
        metric("unauthorized_total", "counter", "Requests refused for a missing or wrong "
               "token.", [("", self.unauthorized)])
        metric("refused_messages_total", "counter", "Client messages refused, by stage.",
               [(f'{{stage="{s}"}}', n) for s, n in sorted(self.refused.items())]
               or [("", 0)])
        metric("connections_closed_total", "counter", "Connections ended, by reason.",
               [(f'{{reason="{r}"}}', n) for r, n in sorted(self.closed.items())]
               or [("", 0)])
        metric("wire_bytes_total", "counter", "WebSocket payload bytes, by direction.",
               [(f'{{direction="{d}"}}', n) for d, n in sorted(self.bytes.items())]
               or [("", 0)])
        metric("uptime_seconds", "gauge", "Seconds since the server started.",
               [("", round(time.monotonic() - self.started, 1))])
        return "\n".join(lines) + "\n"
