"""Voices for the training dialogues: a TTS hook, with espeak-ng offline as its one backend.

A synthesizer turns one turn's text into 24 kHz mono speech and the start/end time of each
word: the assistant's text stream is built from those timings. Any backend implementing
`SpeechSynthesizer` plugs into the recipe (`app.training.recipe`).

espeak-ng: the library (libespeak-ng, which the Debian package installs) is driven through
ctypes in synchronous mode, and its WORD events give each word's audio position in ms:
real word boundaries, not an estimate. If the library cannot be loaded, the `espeak-ng`
command is used and the words are spread over the voiced part of the utterance in
proportion to their length in letters (`timing == "spread"`): coarser, documented as such.
The user and the assistant get different voices (variants of two accents).

Kyutai's TTS (not implemented here; it needs a GPU and its weights): moshi 0.2.13 ships
`moshi.models.tts.TTSModel`. A `KyutaiSynthesizer` would load it from a local
`CheckpointInfo` (as `app.checkpoints.loader` does for Moshi), call `prepare_script` /
`generate` with one voice per role (its voice embeddings), decode the frames with its Mimi,
and take word timings from the steps at which its state machine consumed each word
(`on_text_hook` sees the text stream frame by frame; 12.5 frames per second). It returns
the same `Utterance`, so nothing else in the recipe changes. `make_synthesizer("kyutai")`
says so instead of pretending.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import io
import re
import shutil
import subprocess
import threading
import wave
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from app.audio_file import _resample_aligned
from app.frames import SAMPLE_RATE

# Different accent and variant per role, so the two sides do not sound alike.
DEFAULT_VOICES = {"user": "en-us+f3", "assistant": "en-gb-x-rp+m3"}
DEFAULT_WPM = 165


@dataclass(frozen=True)
class WordTiming:
    word: str
    start_s: float
    end_s: float


@dataclass(frozen=True)
class Utterance:
    pcm: np.ndarray  # [N] float32, 24 kHz mono
    words: tuple[WordTiming, ...]
    timing: str  # "events": the engine's word boundaries; "spread": estimated

    @property
    def seconds(self) -> float:
        return len(self.pcm) / SAMPLE_RATE


class SpeechSynthesizer(Protocol):
    """The TTS hook: one turn's text, spoken by the voice of `role` ("user"/"assistant")."""

    name: str

    def synthesize(self, text: str, role: str) -> Utterance: ...


_WORD = re.compile(r"\S+")


def words_of(text: str) -> list[tuple[int, str]]:
    """(character offset, word) for each whitespace-separated word."""
    return [(m.start(), m.group()) for m in _WORD.finditer(text)]


def spread_words(text: str, pcm: np.ndarray, threshold: float = 0.01) -> tuple[WordTiming, ...]:
    """Words spread over the voiced part of `pcm`, in proportion to their letters."""
    words = [w for _, w in words_of(text)]
    voiced = np.flatnonzero(np.abs(pcm) > threshold)
    start = voiced[0] / SAMPLE_RATE if voiced.size else 0.0
    end = voiced[-1] / SAMPLE_RATE if voiced.size else len(pcm) / SAMPLE_RATE
    weights = np.array([max(1, len(w)) for w in words], dtype=np.float64)
    edges = start + (end - start) * np.concatenate([[0.0], np.cumsum(weights) / weights.sum()])
    return tuple(WordTiming(w, float(a), float(b)) for w, a, b in zip(words, edges, edges[1:],
                                                                         strict=False))


# ---- espeak-ng through its library ---------------------------------------------------------

_AUDIO_OUTPUT_SYNCHRONOUS = 0x02
_POS_CHARACTER = 1
_CHARS_UTF8 = 1
_EVENT_END_OF_LIST = 0
_EVENT_WORD = 1


class _Event(ctypes.Structure):
    _fields_ = [
        ("type", ctypes.c_int),
        ("unique_identifier", ctypes.c_uint),
        ("text_position", ctypes.c_int),  # 1-based, in characters
        ("length", ctypes.c_int),
        ("audio_position", ctypes.c_int),  # ms from the start of the synthesis
        ("sample", ctypes.c_int),
        ("user_data", ctypes.c_void_p),
        ("id", ctypes.c_char * 8),
    ]


_Callback = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int,
                             ctypes.POINTER(_Event))


class _EspeakLibrary:
    """libespeak-ng has one global state: one instance per process, behind a lock."""

    _instance: _EspeakLibrary | None = None
    _create_lock = threading.Lock()

    def __init__(self) -> None:
        path = ctypes.util.find_library("espeak-ng") or "libespeak-ng.so.1"
        self._lib = ctypes.CDLL(path)
        self.sample_rate = int(self._lib.espeak_Initialize(_AUDIO_OUTPUT_SYNCHRONOUS, 0, None, 0))
        if self.sample_rate <= 0:
            raise OSError("espeak_Initialize failed (no espeak-ng data?)")
        self._lock = threading.Lock()
        self._chunks: list[np.ndarray] = []
        self._events: list[tuple[int, int, int]] = []  # (text position, length, ms)
        self._callback = _Callback(self._on_audio)  # kept alive as long as the library
        self._lib.espeak_SetSynthCallback(self._callback)

    @classmethod
    def get(cls) -> _EspeakLibrary:
        with cls._create_lock:
            if cls._instance is None:
                cls._instance = cls()
            return cls._instance

    def _on_audio(self, wav, count, events) -> int:
        if count > 0:
            self._chunks.append(np.ctypeslib.as_array(wav, (count,)).astype(np.float32) / 32768)
        i = 0
        while events[i].type != _EVENT_END_OF_LIST:
            event = events[i]
            if event.type == _EVENT_WORD:
                self._events.append((event.text_position - 1, event.length,
                                     event.audio_position))
            i += 1
        return 0

    def speak(self, text: str, voice: str, wpm: int) -> tuple[np.ndarray, list[tuple[int, int]]]:
        """PCM at the library's rate and (character offset, ms) of each word event."""
        with self._lock:
            self._chunks, self._events = [], []
            if self._lib.espeak_SetVoiceByName(voice.encode()) != 0:
                raise ValueError(f"espeak-ng has no voice {voice!r}")
            self._lib.espeak_SetParameter(1, wpm, 0)  # espeakRATE, absolute
            data = text.encode("utf-8")
            status = self._lib.espeak_Synth(data, len(data) + 1, 0, _POS_CHARACTER, 0,
                                            _CHARS_UTF8, None, None)
            self._lib.espeak_Synchronize()
            if status != 0:
                raise RuntimeError(f"espeak_Synth failed ({status})")
            pcm = np.concatenate(self._chunks) if self._chunks else np.zeros(0, np.float32)
            return pcm, [(pos, ms) for pos, _, ms in self._events]


class EspeakSynthesizer:
    """espeak-ng voices, word boundaries from the library's WORD events."""

    name = "espeak-ng"

    def __init__(self, voices: dict[str, str] | None = None, wpm: int = DEFAULT_WPM) -> None:
        self.voices = dict(DEFAULT_VOICES if voices is None else voices)
        self.wpm = wpm
        try:
            self._library: _EspeakLibrary | None = _EspeakLibrary.get()
        except OSError as exc:
            self._library = None
            if shutil.which("espeak-ng") is None:
                raise RuntimeError(
                    "espeak-ng is not installed (apt-get install espeak-ng)") from exc

    def synthesize(self, text: str, role: str) -> Utterance:
        voice = self.voices[role]
        if self._library is None:
            return self._synthesize_command(text, voice)
        raw, events = self._library.speak(text, voice, self.wpm)
        pcm = _resample_aligned(raw, self._library.sample_rate) if raw.size else raw
        words = words_of(text)
        starts: list[float | None] = [None] * len(words)
        for position, ms in events:  # each event to the word holding its first character
            for i, (offset, word) in enumerate(words):
                if offset <= position < offset + len(word) and starts[i] is None:
                    starts[i] = ms / 1000
                    break
        found = [s for s in starts if s is not None]
        if len(found) < len(starts):  # a word espeak merged or split: fall back
            return Utterance(pcm, spread_words(text, pcm), "spread")
        duration = len(pcm) / SAMPLE_RATE
        ends = [*found[1:], duration]
        timings = tuple(WordTiming(w, float(s), float(min(e, duration)))
                        for (_, w), s, e in zip(words, found, ends, strict=True))
        return Utterance(pcm.astype(np.float32), timings, "events")

    def _synthesize_command(self, text: str, voice: str) -> Utterance:
        result = subprocess.run(
            ["espeak-ng", "-v", voice, "-s", str(self.wpm), "--stdout", text],
            capture_output=True, check=True, timeout=60,
        )
        # A 16-bit mono WAV; written to a pipe, its header claims a huge length, which the
        # standard library's reader tolerates (it reads what is there).
        with wave.open(io.BytesIO(result.stdout)) as wav:
            if wav.getsampwidth() != 2 or wav.getnchannels() != 1:
                raise RuntimeError("espeak-ng wrote audio that is not 16-bit mono")
            rate = wav.getframerate()
            frames = wav.readframes(wav.getnframes())
        raw = np.frombuffer(frames, dtype="<i2").astype(np.float32) / 32768
        pcm = _resample_aligned(raw, rate) if rate != SAMPLE_RATE else raw
        return Utterance(pcm.astype(np.float32), spread_words(text, pcm), "spread")


def make_synthesizer(name: str = "espeak") -> SpeechSynthesizer:
    if name in ("espeak", "espeak-ng"):
        return EspeakSynthesizer()
    if name == "kyutai":
        raise NotImplementedError(
            "Kyutai's TTS is not wired in yet: see app/training/tts.py for how to plug it in "
            "(moshi.models.tts.TTSModel on a GPU, same Utterance result)"
        )
    raise ValueError(f"unknown TTS {name!r} (choose espeak or kyutai)")
