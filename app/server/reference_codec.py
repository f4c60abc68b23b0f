"""The Context Spanning reference's `/ws`: one binary message is one 80 ms frame of float32
PCM (1920 little-endian samples at 24 kHz) both ways; every other message is JSON text. The
one binary message after a `clone` is a voice recording, not a frame (voice_clone.py)."""

from __future__ import annotations

import numpy as np

from app.frames import FRAME_SAMPLES
from app.server.codec import Frame, Inbound
from app.server.voice_clone import is_clone_request, voice_recording
from app.server.wire_socket import Incoming
from app.wire import events as wire

FRAME_BYTES = FRAME_SAMPLES * 4


def pcm_frame(data: bytes, index: int) -> Frame:
    """A frame from the wire, checked: the right size, float32, finite. Loud samples are
    clipped to [-1, 1], as a sound card would; anything else is refused with WireError."""
    if len(data) % 4:
        raise wire.WireError("frame", f"{len(data)} bytes are not float32 samples")
    if len(data) != FRAME_BYTES:
        raise wire.WireError("frame", f"a frame is {FRAME_SAMPLES} float32 samples "
                                      f"({FRAME_BYTES} bytes), not {len(data) // 4}")
    pcm = np.frombuffer(data, dtype="<f4")
    if not np.isfinite(pcm).all():
        raise wire.WireError("frame", "the frame holds NaN or infinite samples")
    return Frame(np.clip(pcm, -1.0, 1.0).astype(np.float32), index)


class ReferenceCodec:
    protocol = "reference"
    controls = True

    def __init__(self) -> None:
        self._frames = 0
        # A `clone` came: the next binary message is its recording (read past the usual
        # message limit, and not counted as a frame).
        self.expects_recording = False

    @property
    def frames_received(self) -> int:
        return self._frames

    def decode(self, message: Incoming) -> list[Inbound]:
        if message.kind == "text":
            if is_clone_request(message.data):  # nothing to do until its recording comes
                self.expects_recording = True
                return []
            try:
                return [wire.decode_request(message.data)]
            except wire.WireError as exc:
                return [exc]
        assert isinstance(message.data, bytes)
        if self.expects_recording:
            self.expects_recording = False
            try:
                return [voice_recording(message.data)]
            except wire.WireError as exc:
                return [exc]
        index = self._frames
        self._frames += 1
        try:
            return [pcm_frame(message.data, index)]
        except wire.WireError as exc:
            return [wire.WireError(exc.stage, str(exc), index)]

    def skip(self, message: Incoming) -> int | None:
        if message.kind != "binary":
            return None
        if self.expects_recording:  # a recording refused unread: it takes no frame index
            self.expects_recording = False
            return None
        self._frames += 1
        return self._frames - 1

    def ready(self, event: wire.Ready) -> list[bytes | str]:
        return [wire.encode_event(event)]

    def audio(self, pcm: np.ndarray) -> list[bytes | str]:
        return [np.asarray(pcm, dtype="<f4").tobytes()]

    def event(self, event: wire.ServerEvent) -> list[bytes | str]:
        return [wire.encode_event(event)]
