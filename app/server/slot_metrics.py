"""`/metrics` of the engine: whether it serves (and its failures and restarts), and per slot
of a `serve --slots N` server each row of the batched engine, with the figures of the
conversation that holds it (or held it last).

Read from the engine's counters at scrape time (app/engine/row_conversation.py): frames,
frames whose batched tick took longer than the 80 ms frame, the frame time's p50 and p99
over the last minute, spans landed and frames dropped. A row's counters start again with
each conversation (Prometheus reads a counter that drops as a reset).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from app.frames import FRAME_MS
from app.server.metrics import PREFIX

if TYPE_CHECKING:
    from app.engine.speech_engine import ConversationStats
    from app.server.engine_host import EngineHost

_SERIES = (  # name, kind, help, the ConversationStats field
    ("slot_frames_total", "counter", "Frames stepped for the slot's conversation.", "frames"),
    ("slot_late_frames_total", "counter",
     f"The slot's frames whose batched tick exceeded the {FRAME_MS:g} ms frame.",
     "late_frames"),
    ("slot_frame_ms_p50", "gauge", "Median frame time of the slot over the last minute, ms.",
     "frame_ms_p50"),
    ("slot_frame_ms_p99", "gauge", "99th percentile frame time of the slot over the last "
     "minute, ms.", "frame_ms_p99"),
    ("slot_spans_total", "counter", "Spans landed in the slot's conversation.",
     "spans_landed"),
    ("slot_dropped_frames_total", "counter", "User frames the slot's engine queue dropped.",
     "dropped_frames"),
)


def render_slots(slots: int, free: int, rows: Sequence[tuple[int, ConversationStats | None]],
                 busy_rows: frozenset[int] = frozenset()) -> str:
    """Prometheus text for the slots ('' with one slot: the process-wide series say it)."""
    if slots <= 1:
        return ""
    lines = [f"# HELP {PREFIX}_slots Conversation slots of the batched engine.",
             f"# TYPE {PREFIX}_slots gauge", f"{PREFIX}_slots {slots}",
             f"# HELP {PREFIX}_slots_free Slots free for a new conversation.",
             f"# TYPE {PREFIX}_slots_free gauge", f"{PREFIX}_slots_free {free}",
             f"# HELP {PREFIX}_slot_active 1 while a conversation holds the slot.",
             f"# TYPE {PREFIX}_slot_active gauge"]
    lines += [f'{PREFIX}_slot_active{{slot="{row}"}} {int(row in busy_rows)}'
              for row, _ in rows]
    for name, kind, help_text, field in _SERIES:
        samples = [(row, getattr(stats, field)) for row, stats in rows if stats is not None]
        samples = [(row, value) for row, value in samples if value is not None]
        if not samples:
            continue
        lines += [f"# HELP {PREFIX}_{name} {help_text}", f"# TYPE {PREFIX}_{name} {kind}"]
        lines += [f'{PREFIX}_{name}{{slot="{row}"}} {value:g}' for row, value in samples]
    return "\n".join(lines) + "\n"


def render_host_slots(host: EngineHost) -> str:
    """The engine's state, then the slots of `host` (none with one slot)."""
    return render_engine_state(host) + render_slots(host.slots, host.free_slots,
                                                    host.slot_stats(), host.active_rows())


def render_engine_state(host: EngineHost) -> str:
    """Whether the engine serves, and how often it failed and was replaced."""
    lines = [f"# HELP {PREFIX}_engine_up 1 while the engine can take conversations (0 while "
             "it starts, restarts after a failure, or has failed).",
             f"# TYPE {PREFIX}_engine_up gauge", f"{PREFIX}_engine_up {int(host.serving)}",
             f"# HELP {PREFIX}_engine_failures_total Engine or recogniser failures while "
             "serving.",
             f"# TYPE {PREFIX}_engine_failures_total counter",
             f"{PREFIX}_engine_failures_total {host.failures}",
             f"# HELP {PREFIX}_engine_restarts_total New engines or recognisers that replaced "
             "a failed one.",
             f"# TYPE {PREFIX}_engine_restarts_total counter",
             f"{PREFIX}_engine_restarts_total {host.restarts}"]
    return "\n".join(lines) + "\n"
