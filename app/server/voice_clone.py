"""A voice from the user's own recording: the reference protocol's `clone` on `/ws`.

The client sends `{"type": "clone"}`, then ONE binary message: the recording, float32 mono
PCM at the `ready`'s sample rate (24 kHz), 2 to 30 s. It is taken before the conversation's
first frame, on checkpoints whose start carries a voice prompt (the PersonaPlex family:
PersonaPlex, the Context Spanning release, tiny-persona, tiny-cs); anywhere else it is
refused with an `error` and the recording is dropped (never read as a frame). Once the
conversation with that voice is ready the server answers `cloned{frames, seconds}`: the
voice prompt's Mimi frames and their length. The voice stays on the connection (a `reset`
keeps it; a `voice` message replaces it).

The recording becomes the engine's voice as a WAV file in the connection's own folder, so it
takes the same path as a voice file given to `serve --voice`
(app/engine/conversation_start.py `load_voice`: resampled to 24 kHz, levelled to -24 LUFS
(BS.1770, app/audio/loudness.py), Mimi-encoded in one non-streaming pass), on the engine's
own thread, where Mimi is not streaming at that moment (a batched engine's slots share one
Mimi).

The messages belong with the wire's others in app/wire/events.py; they are here until that
module takes them.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import numpy.typing as npt

from app.frames import FRAME_S, FRAME_SAMPLES, SAMPLE_RATE
from app.wire import events as wire

CLONE_MIN_S = 2.0
CLONE_MAX_S = 30.0
# The one message allowed past the usual size limit: 30 s of float32 at 24 kHz (2.88 MB).
CLONE_MAX_BYTES = round(CLONE_MAX_S * SAMPLE_RATE) * 4
CLONE_TYPE = "clone"  # {"type": "clone"}: the next binary message is a voice recording


@dataclass(frozen=True)
class VoiceRecording:
    pcm: npt.NDArray[np.float32]  # [n] at 24 kHz, finite, within [-1, 1], 2 to 30 s


@dataclass(frozen=True)
class Cloned:
    TYPE: ClassVar[str] = "cloned"
    frames: int  # Mimi frames of the voice prompt
    seconds: float


def is_clone_request(text: str | bytes) -> bool:
    """Whether a text message is `clone` (anything else goes to the wire's decoder; most
    messages are told apart without parsing them twice)."""
    if b"clone" not in (text.encode() if isinstance(text, str) else text):
        return False
    try:
        obj = json.loads(text)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return False
    return isinstance(obj, dict) and obj.get("type") == CLONE_TYPE


def voice_recording(data: bytes) -> VoiceRecording:
    """The recording of a clone, checked; WireError (stage "voice") says what is wrong."""
    if len(data) % 4:
        raise wire.WireError("voice", f"a voice recording is float32 samples; {len(data)} "
                                      "bytes are not")
    seconds = len(data) / 4 / SAMPLE_RATE
    if seconds < CLONE_MIN_S:
        raise wire.WireError("voice", f"a voice recording needs at least {CLONE_MIN_S:g} s of "
                                      f"speech at {SAMPLE_RATE} Hz; this one is "
                                      f"{seconds:.2f} s")
    if seconds > CLONE_MAX_S:
        raise wire.WireError("voice", f"a voice recording is at most {CLONE_MAX_S:g} s; this "
                                      f"one is {seconds:.1f} s")
    pcm = np.frombuffer(data, dtype="<f4")
    if not np.isfinite(pcm).all():
        raise wire.WireError("voice", "the voice recording holds NaN or infinite samples")
    return VoiceRecording(np.clip(pcm, -1.0, 1.0).astype(np.float32))


def prompt_frames(recording: VoiceRecording) -> Cloned:
    """What `cloned` says of a recording: Mimi encodes it padded to whole frames."""
    frames = math.ceil(len(recording.pcm) / FRAME_SAMPLES)
    return Cloned(frames, round(frames * FRAME_S, 2))


def write_recording(recording: VoiceRecording, folder: Path, number: int) -> Path:
    """The recording as a 24 kHz WAV file the engine reads as its voice."""
    import sphn

    path = folder / f"cloned-{number}.wav"
    sphn.write_wav(str(path), recording.pcm, SAMPLE_RATE)
    return path


def encode_cloned(event: Cloned) -> str:
    return json.dumps({"type": event.TYPE, "frames": event.frames, "seconds": event.seconds})
