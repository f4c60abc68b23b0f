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
class LinkStalled:
    """Nothing has come from the server for `silent_s` (its pongs come every second on a
    working link): the network stalls. The connection and its conversation are kept and
    waited for; only a silence of `gives_up_s` ends it (then ConnectionLost, and a
    reconnect). A microphone's frames that cannot go meanwhile are dropped and counted
    (sent seconds late they would only delay the conversation)."""

    silent_s: float
    gives_up_s: float


@dataclass(frozen=True)
class LinkResumed:
    """The server is heard again after a stall of `stalled_s`: the conversation goes on
    where it was (what waited on either side flows on). `frames_not_sent`: the user's
    frames dropped while it stalled (0: nothing the user said was lost)."""

    stalled_s: float
    frames_not_sent: int


@dataclass(frozen=True)
class NetworkStats:
    """The link to the speech server, in its parts: an audio frame's round trip (sent ->
    the frame that answers it) is the network's round trip plus the frame's time at the
    server (queued, then stepped)."""

    connected: bool
    # An audio frame's round trip, median over the last 2 s (None: no frame came back yet).
    frame_rtt_ms: float | None
    late_frames: int  # frames whose round trip overran the playback buffer's margin
    network_rtt_ms: float | None = None  # the connection's own round trip (pings), median
    audio_codec: str = "pcm"  # "opus" or "pcm", as the server agreed
    bytes_sent: int = 0  # audio and messages, every connection of this conversation
    bytes_received: int = 0

    @property
    def server_ms(self) -> float | None:
        """What a frame spends at the server: its round trip less the network's."""
        if self.frame_rtt_ms is None or self.network_rtt_ms is None:
            return None
        return max(0.0, self.frame_rtt_ms - self.network_rtt_ms)


# What a remote engine says of its link in the conversation's queue (NetworkStats is read
# by asking the engine: `network_stats()`, never queued).
LinkEvent = ConnectionLost | ReconnectFailed | Reconnected | LinkStalled | LinkResumed
