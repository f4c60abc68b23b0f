"""What a server is told at start: where it listens, who may use it, and its limits."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from app.server.voice_clone import CLONE_MAX_BYTES

DEFAULT_PORT = 8998  # moshi's: `python -m moshi.client` finds us without arguments
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


@dataclass(frozen=True)
class Limits:
    """Per connection. A message over `max_message_bytes` is refused with an error event
    (but a `clone`'s recording, up to 30 s of PCM); one over `hard_message_bytes` is not
    even read (the socket closes with 1009)."""

    idle_timeout_s: float = 60.0  # no message from the client for this long: closed
    max_conversation_s: float = 3600.0  # a connection holds the engine at most this long
    max_message_bytes: int = 64 * 1024  # a PCM frame is 7680 bytes, an Opus page ~400
    # A ping after this long without a message, a pong due within half of it: a client that
    # vanished without closing (its machine or network gone) frees the engine within 1.5x
    # (15 s), and a network that stalls for less than that (Wi-Fi and mobile links stall for
    # seconds) keeps its conversation: what waited on either side flows on after it.
    # A talking client sends 12.5 frames a second, so a working one is never pinged.
    heartbeat_s: float = 10.0
    # Audio waiting longer for a slow reader: the client is dropped. Longer than a stall the
    # heartbeat rides out, so a link that comes back is not taken for a reader that stopped.
    max_send_lag_s: float = 20.0
    stop_timeout_s: float = 30.0  # how long an engine may take to stop
    # A connection's request headers (a WebSocket handshake too) must all arrive within this;
    # past `max_connections` open at once a new one is answered 503 (connection_guard.py).
    header_timeout_s: float = 10.0
    max_connections: int = 64

    @property
    def hard_message_bytes(self) -> int:
        """Past this a message is not read: 16 times the limit, and at least twice the
        longest voice recording a `clone` may send (voice_clone.py), so a recording a
        little too long is told so, not cut off with 1009."""
        return max(16 * self.max_message_bytes, 2 * CLONE_MAX_BYTES)

    @property
    def inbox_bytes(self) -> int:
        """The most bytes of a connection's messages read and not yet processed (a client
        further ahead waits at its socket): a few of the largest, many frames."""
        return 2 * self.hard_message_bytes

    def check(self) -> None:
        for name in ("idle_timeout_s", "max_conversation_s", "heartbeat_s", "max_send_lag_s",
                     "stop_timeout_s", "header_timeout_s"):
            value = getattr(self, name)
            if not 0 < value < float("inf"):  # NaN fails too
                raise ValueError(f"{name.removesuffix('_s').replace('_', ' ')} must be a "
                                 f"positive number of seconds, not {value}")
        if self.max_connections < 2:
            raise ValueError("the connection cap must be at least 2 (a conversation and a "
                             "health check)")
        if self.max_message_bytes < 8 * 1024:
            raise ValueError("the message size limit must be at least 8192 bytes (a frame of "
                             "PCM is 7680)")


@dataclass(frozen=True)
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    token: str | None = None
    ssl_cert: Path | None = None
    ssl_key: Path | None = None
    limits: Limits = Limits()

    @property
    def scheme(self) -> str:
        return "https" if self.ssl_cert else "http"
