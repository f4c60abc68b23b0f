"""What a remote engine says about its connection, beside the engine's own events.

They travel in the same queue as the engine's events (app/engine/events.py); the session
turns them into notices and the paused / running state.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ConnectionLost:
    """The connection to the server dropped; the engine tries again after `retry_in_s`."""

    reason: str
    retry_in_s: float


@dataclass(frozen=True)
class ReconnectFailed:
    """One more attempt failed (unreachable, a bad token, busy); the next after `retry_in_s`."""

    reason: str
    retry_in_s: float


@dataclass(frozen=True)
class Reconnected:
    """Connected again: a new conversation on the server, the model's context is empty."""

    model: str
    device: str


@dataclass(frozen=True)
class NetworkStats:
    """Round trips of audio frames (sent frame -> the frame that answers it)."""

    connected: bool
    rtt_ms: float | None  # median over the last few seconds (None: no frame came back yet)
    late_frames: int  # frames whose round trip overran the playback buffer's margin
