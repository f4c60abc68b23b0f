"""What the ASR thread emits. Times are seconds of user audio since the stream started."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AsrWord:
    text: str
    start_s: float
    end_s: float


@dataclass(frozen=True)
class AsrPartial:
    """The utterance so far (grows word by word)."""

    text: str
    start_s: float
    end_s: float
    # Whether a voice-activity detector heard the user speak in this utterance so far: a
    # recogniser also makes words of silence and noise, so with one on, words alone are not
    # the user speaking. None: no detector (the words are all there is to go by).
    voiced: bool | None = None


@dataclass(frozen=True)
class AsrFinal:
    """A finished utterance: the user's turn ended (end of speech detected)."""

    text: str
    start_s: float
    end_s: float
    detected_by: str  # "stt" (the STT's own end-of-speech head) or "vad"
    detected_at_s: float  # audio time at which the end of turn was decided
    # Frames of the user's audio the recognizer never got (its queue was full: the computer
    # is too busy) since the previous turn ended: words of this turn may be missing.
    missed_frames: int = 0
    # The utterance's words with their times (what FDB v3 reads the user's end from).
    words: tuple[AsrWord, ...] = ()


@dataclass(frozen=True)
class AsrError:
    message: str
    fatal: bool


AsrEvent = AsrWord | AsrPartial | AsrFinal | AsrError
