"""80 ms frames as Ogg/Opus pages and back (sphn, the library moshi's own client and server
use), for the wire's `/ws` once both ends agreed on Opus (app/wire/events.py `AudioCodec`).

sphn's writer gives the pages of each 1920-sample frame as soon as it has the frame, and
its reader gives the frame back from those pages at once: a frame costs ~330 bytes instead
of 7,680 (about 33 kbit/s instead of 768), and adds no frame of buffering either way.
One message on the wire carries one frame's pages, so a frame that cannot be read is
still one frame: the reader says so and the next message is read afresh.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import sphn

from app.frames import FRAME_SAMPLES, SAMPLE_RATE

OGG_CAPTURE = b"OggS"  # every Ogg page begins with it; a float32 PCM frame in [-1, 1] never
# The reader keeps Ogg pages until their packet ends: valid pages whose packet never ends
# would have it hold all a peer sends. A real frame's pages are a few hundred bytes; this
# much that gives no audio at all is not a stream.
MAX_UNDECODED_BYTES = 256 * 1024


class OpusError(ValueError):
    """Pages that do not decode (dropped: the reader starts afresh on the next message)."""


class OpusStuck(OpusError):
    """MAX_UNDECODED_BYTES of pages gave no audio: the peer sends a packet that never ends."""


def is_ogg(data: bytes) -> bool:
    return data.startswith(OGG_CAPTURE)


class OpusFrameReader:
    """Ogg/Opus pages in, whole 80 ms frames (float32 [1920], within [-1, 1]) out."""

    def __init__(self) -> None:
        self._reader = sphn.OpusStreamReader(SAMPLE_RATE)
        self._pending: npt.NDArray[np.float32] = np.zeros(0, dtype=np.float32)
        self._undecoded = 0  # bytes given to the reader since it last gave audio

    def frames(self, pages: bytes) -> list[npt.NDArray[np.float32]]:
        """The whole frames these pages complete (often exactly one). Raises OpusError
        when they do not decode, OpusStuck when too much gave no audio."""
        if not is_ogg(pages):
            raise OpusError("not Ogg/Opus audio (no Ogg page)")
        try:
            pcm = self._reader.append_bytes(pages)
        except ValueError as exc:
            # What the reader held before (a broken page) may have spoiled this one: a
            # fresh reader reads it again; if it fails there too, the page is garbage.
            self._reader = sphn.OpusStreamReader(SAMPLE_RATE)
            try:
                pcm = self._reader.append_bytes(pages)
            except ValueError:
                self._reader = sphn.OpusStreamReader(SAMPLE_RATE)
                raise OpusError(f"a broken Ogg/Opus page was dropped: {exc}") from None
        self._undecoded = 0 if len(pcm) else self._undecoded + len(pages)
        if self._undecoded > MAX_UNDECODED_BYTES:
            held, self._undecoded = self._undecoded, 0
            self._reader = sphn.OpusStreamReader(SAMPLE_RATE)  # what it held is let go
            raise OpusStuck(f"{held} bytes of Ogg pages gave no audio (a packet that never "
                            f"ends): at most {MAX_UNDECODED_BYTES} are held")
        self._pending = np.concatenate([self._pending, np.asarray(pcm, dtype=np.float32)])
        out = []
        while len(self._pending) >= FRAME_SAMPLES:
            out.append(np.clip(self._pending[:FRAME_SAMPLES], -1.0, 1.0).astype(np.float32))
            self._pending = self._pending[FRAME_SAMPLES:]
        return out


class OpusFrameWriter:
    """80 ms frames in, the Ogg/Opus pages that carry each out (the first with the stream's
    headers)."""

    def __init__(self) -> None:
        self._writer = sphn.OpusStreamWriter(SAMPLE_RATE)

    def pages(self, pcm: np.ndarray) -> bytes:
        frame = np.asarray(pcm, dtype=np.float32)
        if frame.shape != (FRAME_SAMPLES,):
            raise ValueError(f"a frame is {FRAME_SAMPLES} samples, got shape {frame.shape}")
        return bytes(self._writer.append_pcm(frame))
