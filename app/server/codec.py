"""What a protocol does with messages: the connection logic (connection.py) is the same for
moshi's `/api/chat` (moshi_codec.py) and the reference's `/ws` (reference_codec.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from app.server.voice_clone import VoiceRecording
from app.server.wire_socket import Incoming
from app.wire import events as wire


@dataclass(frozen=True)
class Frame:
    pcm: npt.NDArray[np.float32]  # [1920] at 24 kHz, finite, within [-1, 1]
    index: int  # among this connection's frames, from 0


@dataclass(frozen=True)
class Goodbye:
    """The codec cannot go on with this client (what it sent would have it hold ever more
    memory): the error is sent, then the socket closes with `code`."""

    error: wire.WireError
    code: int
    reason: str  # for the close frame and the metrics


# VoiceRecording: /ws only, the message after a `clone` (voice_clone.py).
Inbound = Frame | wire.ClientMessage | wire.WireError | Goodbye | VoiceRecording


class Codec(Protocol):
    protocol: str  # a label for metrics and logs
    controls: bool  # whether the client may send context, voice and reset

    @property
    def frames_received(self) -> int:
        """Frames this connection has sent so far (refused ones included)."""

    def decode(self, message: Incoming) -> list[Inbound]: ...
    def skip(self, message: Incoming) -> int | None:
        """A message refused unread (too big): the frame index it took, if it counts as one."""
    def ready(self, event: wire.Ready) -> list[bytes | str]: ...
    def audio(self, pcm: npt.NDArray[np.float32]) -> list[bytes | str]: ...
    def event(self, event: wire.ServerEvent) -> list[bytes | str]: ...
