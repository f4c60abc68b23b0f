"""moshi's `/api/chat`: binary messages whose first byte is the kind.

- 0x00 handshake, sent once when the engine is ready;
- 0x01 Ogg/Opus audio at 24 kHz, both ways (sphn's stream reader and writer, as moshi's own
  server and client use them); the decoded audio is cut into 80 ms frames;
- 0x02 a text piece of the model's (UTF-8);
- 0x05 an error (UTF-8), moshi's error kind;
- 0x10 ours: a JSON message (app/wire/events.py). A client sends `{"type": "span", ...}` and
  receives its span's events, the <ret>s and every other event as 0x10 too. moshi's family
  uses 0x00-0x0A (0x07 is the web UI's colored text, 0x08 moshivis' image), and its web UI
  throws on a kind it does not know: so the server sends 0x10 only to a client that asked,
  by sending one (a span) or by connecting with `?events=json`. A stock client never sees it.
Other kinds a client sends (moshi's control, metadata and ping) are ignored, as moshi does.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import sphn
from aiohttp import WSCloseCode

from app.frames import FRAME_SAMPLES, SAMPLE_RATE
from app.server.codec import Frame, Goodbye, Inbound
from app.server.wire_socket import Incoming
from app.wire import events as wire

HANDSHAKE = 0x00
AUDIO = 0x01
TEXT = 0x02
ERROR = 0x05
JSON = 0x10
EVENTS_QUERY = ("events", "json")  # `?events=json`: JSON events from the start
# The Opus reader keeps Ogg pages until their packet ends: valid pages whose packet never
# ends would have it hold all a client sends. A real frame's pages are a few hundred bytes;
# this much that gives no audio at all is not a stream.
MAX_UNDECODED_BYTES = 256 * 1024


class MoshiCodec:
    protocol = "moshi"
    controls = False  # no context, voice or reset in moshi's protocol

    def __init__(self, events: bool = False) -> None:
        self._events = events  # whether this client takes our JSON kind
        self._reader = sphn.OpusStreamReader(SAMPLE_RATE)
        self._writer = sphn.OpusStreamWriter(SAMPLE_RATE)
        self._pending: npt.NDArray[np.float32] = np.zeros(0, dtype=np.float32)
        self._frames = 0
        self._handshake_sent = False
        self._undecoded = 0  # bytes given to the reader since it last gave audio

    @property
    def frames_received(self) -> int:
        return self._frames

    def decode(self, message: Incoming) -> list[Inbound]:
        data = message.data
        if not isinstance(data, bytes):
            return [wire.WireError("message", "/api/chat takes binary messages")]
        if not data:
            return [wire.WireError("message", "an empty message")]
        kind, payload = data[0], data[1:]
        if kind == AUDIO:
            return self._audio(payload)
        if kind == JSON:
            self._events = True  # it speaks our kind: its answers come in it
            try:
                request = wire.decode_request(payload)
            except wire.WireError as exc:
                return [exc]
            if not isinstance(request, wire.SpanRequest):
                return [wire.WireError("message", f"/api/chat takes span messages only, not "
                                                  f"{request.TYPE}")]
            return [request]
        return []

    def _audio(self, payload: bytes) -> list[Inbound]:
        # Each message holds whole Ogg pages (moshi's clients send what the writer gives).
        # Garbage never reaches the reader: one that met it stays broken.
        if not payload.startswith(b"OggS"):
            return [wire.WireError("frame", "not Ogg/Opus audio (no Ogg page)", self._frames)]
        out: list[Inbound] = []
        try:
            pcm = self._reader.append_bytes(payload)
        except ValueError as exc:
            # What the reader held before (a broken page) spoiled this one: a fresh reader
            # reads this page again; if it fails there too, the page itself is garbage.
            out.append(wire.WireError("frame", f"a broken Ogg/Opus page was dropped: {exc}",
                                      self._frames))
            self._reader = sphn.OpusStreamReader(SAMPLE_RATE)
            try:
                pcm = self._reader.append_bytes(payload)
            except ValueError:
                self._reader = sphn.OpusStreamReader(SAMPLE_RATE)
                return out
        self._undecoded = 0 if len(pcm) else self._undecoded + len(payload)
        if self._undecoded > MAX_UNDECODED_BYTES:
            held, self._undecoded = self._undecoded, 0
            self._reader = sphn.OpusStreamReader(SAMPLE_RATE)  # what it held is let go
            out.append(Goodbye(wire.WireError(
                "frame", f"{held} bytes of Ogg pages gave no audio (a packet that never "
                         f"ends): at most {MAX_UNDECODED_BYTES} are held, so the connection "
                         "closes", self._frames), WSCloseCode.MESSAGE_TOO_BIG,
                "undecodable audio"))
            return out
        self._pending = np.concatenate([self._pending, np.asarray(pcm, dtype=np.float32)])
        while len(self._pending) >= FRAME_SAMPLES:
            frame = np.clip(self._pending[:FRAME_SAMPLES], -1.0, 1.0)
            self._pending = self._pending[FRAME_SAMPLES:]
            out.append(Frame(frame, self._frames))
            self._frames += 1
        return out

    def skip(self, message: Incoming) -> int | None:
        return None  # an Opus message is not a frame

    def ready(self, event: wire.Ready) -> list[bytes | str]:
        if self._handshake_sent:
            return []
        self._handshake_sent = True
        return [bytes([HANDSHAKE])]

    def audio(self, pcm: npt.NDArray[np.float32]) -> list[bytes | str]:
        pages = self._writer.append_pcm(np.asarray(pcm, dtype=np.float32))
        return [bytes([AUDIO]) + pages] if pages else []

    def event(self, event: wire.ServerEvent) -> list[bytes | str]:
        if isinstance(event, wire.Text):
            return [bytes([TEXT]) + event.delta.encode("utf-8")]
        out: list[bytes | str] = []
        if isinstance(event, wire.Error):
            out.append(bytes([ERROR]) + f"{event.stage}: {event.message}".encode())
        elif isinstance(event, wire.Busy):
            out.append(bytes([ERROR]) + f"busy: {event.message}".encode())
        if self._events:
            out.append(bytes([JSON]) + wire.encode_event(event).encode("utf-8"))
        return out
