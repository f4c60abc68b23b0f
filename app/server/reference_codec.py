"""The Context Spanning reference's `/ws`: one binary message is one 80 ms frame of float32
PCM (1920 little-endian samples at 24 kHz) both ways; every other message is JSON text. The
one binary message after a `clone` is a voice recording, not a frame (voice_clone.py).

A client may ask for Opus instead (`{"type": "audio_codec", "codec": "opus"}`, ours, see
app/wire/events.py): from then on a binary message that begins with an Ogg page is one
frame's Opus pages, any other is still a PCM frame (what it sent before the answer reached
it), and the server's audio goes out as Opus, the first preceded by the answer
`{"type": "audio_codec", "codec": "opus"}`. Nothing changes for a client that never asks.
Likewise `{"type": "words"}` (ours): from then on the model's `text` and the recognition's
`user_text` go out as `words`, each recognised word once and a few frames' in one message
(app/wire/words.py), and every event's JSON without spaces.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from aiohttp import WSCloseCode

from app.frames import FRAME_SAMPLES
from app.server.codec import Frame, Goodbye, Inbound
from app.server.voice_clone import is_clone_request, voice_recording
from app.server.wire_socket import Incoming
from app.wire import events as wire
from app.wire.opus import OpusError, OpusFrameReader, OpusFrameWriter, OpusStuck, is_ogg
from app.wire.words import WordsWriter

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
        # Opus, once the client asked: its reader and writer, and whether the answer went.
        self._opus_in: OpusFrameReader | None = None
        self._opus_out: OpusFrameWriter | None = None
        self._opus_said = False
        self._words: WordsWriter | None = None  # once the client asked for `words`

    @property
    def frames_received(self) -> int:
        return self._frames

    @property
    def audio_codec(self) -> str:
        return wire.OPUS if self._opus_out is not None else wire.PCM

    def decode(self, message: Incoming) -> list[Inbound]:
        if message.kind == "text":
            if is_clone_request(message.data):  # nothing to do until its recording comes
                self.expects_recording = True
                return []
            if wire.is_words_request(message.data):
                self._words = self._words or WordsWriter()
                return []
            try:
                asked = wire.decode_audio_codec_request(message.data)
                if asked is not None:
                    self._choose(asked.codec)
                    return []
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
        if self._opus_in is not None and is_ogg(message.data):
            return self._opus(message.data)
        index = self._frames
        self._frames += 1
        try:
            return [pcm_frame(message.data, index)]
        except wire.WireError as exc:
            return [wire.WireError(exc.stage, str(exc), index)]

    def _choose(self, codec: str) -> None:
        if codec == wire.OPUS and self._opus_in is None:
            self._opus_in, self._opus_out = OpusFrameReader(), OpusFrameWriter()
        elif codec == wire.PCM and self._opus_in is not None:
            raise wire.WireError("message", "the audio is Opus on this connection: it stays "
                                            "so (connect again for PCM)")

    def _opus(self, pages: bytes) -> list[Inbound]:
        assert self._opus_in is not None
        try:
            frames = self._opus_in.frames(pages)
        except OpusStuck as exc:
            return [Goodbye(wire.WireError("frame", f"{exc}, so the connection closes",
                                           self._frames),
                            WSCloseCode.MESSAGE_TOO_BIG, "undecodable audio")]
        except OpusError as exc:  # one message is one frame: the frame is refused
            self._frames += 1
            return [wire.WireError("frame", str(exc), self._frames - 1)]
        out: list[Inbound] = []
        for pcm in frames:
            out.append(Frame(pcm, self._frames))
            self._frames += 1
        return out

    def skip(self, message: Incoming) -> int | None:
        if message.kind != "binary":
            return None
        if self.expects_recording:  # a recording refused unread: it takes no frame index
            self.expects_recording = False
            return None
        self._frames += 1
        return self._frames - 1

    def _encode(self, event: wire.ServerEvent) -> str:
        return wire.encode_event(event, compact=self._words is not None)

    def ready(self, event: wire.Ready) -> list[bytes | str]:
        out: list[bytes | str] = []
        if self._words is not None:  # a new conversation: its words start afresh
            out += [self._encode(w) for w in self._words.new_conversation()]
        return [*out, self._encode(event)]

    def audio(self, pcm: npt.NDArray[np.float32]) -> list[bytes | str]:
        out: list[bytes | str] = []
        if self._words is not None:  # words held long enough go before this frame
            out += [self._encode(w) for w in self._words.frame()]
        if self._opus_out is None:
            return [*out, np.asarray(pcm, dtype="<f4").tobytes()]
        if not self._opus_said:  # just before the first audio in Opus, so the client
            self._opus_said = True  # knows from which binary message on it is Opus
            out.append(self._encode(wire.AudioCodec(wire.OPUS)))
        out.append(self._opus_out.pages(pcm))
        return out

    def event(self, event: wire.ServerEvent) -> list[bytes | str]:
        words = self._words
        if words is None:
            return [wire.encode_event(event)]
        if isinstance(event, wire.UserText):
            due = words.user_text(event)
        elif isinstance(event, wire.Text):
            due = words.text(event)
        else:  # what is held goes first
            return [*(self._encode(w) for w in words.flush()), self._encode(event)]
        return [self._encode(w) for w in due]
