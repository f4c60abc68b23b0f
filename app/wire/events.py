"""The JSON messages of the wire, as named types, both ways.

Server to client: the Context Spanning reference's events (`ready`, `busy`, `text`,
`user_text`, `ret`, `question`, `span`, `no_span`, `late`, `slot`, `voice`, `error`) plus
the span's own life for spans a client sends (`span_queued`, `span_accepted`,
`span_rejected`). Client to server: `context`, `voice`, `reset` and `span`.

Audio on `/ws` is the reference's float32 PCM unless the client asks for Opus with
`{"type": "audio_codec", "codec": "opus"}` (ours, after `ready`): the server then takes
Ogg/Opus pages as well as PCM frames from it, and answers `{"type": "audio_codec",
"codec": "opus"}` just before its first audio in Opus. A client that never asks (the
reference's page) never sees a change; one whose server does not know the message gets an
`error` for it and goes on in PCM. In the same way `{"type": "words"}` (ours) asks for the
model's and the recognition's words as `words` messages, each recognised word sent once
(the utterance's characters kept, and what follows them) and a few frames' words in one
message, instead of a `text` and a `user_text` (the whole utterance again) with each word;
app/wire/words.py writes and reads them.

On `/ws` each is one text message; on `/api/chat` one binary message of kind 0x10 followed
by the same JSON, for clients that asked for it (moshi_codec.py). Unknown fields are
ignored both ways, so either side can grow a field without breaking the other: the one
serialiser and parser of named types (app/wire/named_json.py) reads and writes them, as it
does a run's JSONL records.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, ClassVar

from app.frames import FRAME_SAMPLES, SAMPLE_RATE
from app.wire.named_json import (
    NamedJsonError,
    from_json_object,
    omitted_when_none,
    registry,
    to_json_object,
)

PCM = "pcm"  # the reference's float32 frames
OPUS = "opus"  # Ogg/Opus pages, one frame's per message (app/wire/opus.py)
AUDIO_CODECS = (PCM, OPUS)
MAX_SPAN_CHARS = 16_000  # far above any span's token budget; the engine truncates anyway
MAX_SOURCE_CHARS = 64
MAX_PERSONA_CHARS = 2_000
MAX_PROFILE_CHARS = 100  # the user's name or city
_VOICE_NAME = re.compile(r"[A-Za-z0-9_-]{1,32}")  # a released voice's name, never a path


class WireError(ValueError):
    """A client message the server refuses; `stage` names what it was about, `frame` the
    refused frame's index among the connection's frames."""

    def __init__(self, stage: str, message: str, frame: int | None = None) -> None:
        super().__init__(message)
        self.stage = stage
        self.frame = frame

    def event(self) -> Error:
        return Error(self.stage, str(self), self.frame)


# ---- server -> client ------------------------------------------------------------------


@dataclass(frozen=True)
class Ready:
    TYPE: ClassVar[str] = "ready"
    sample_rate: int = SAMPLE_RATE
    frame_size: int = FRAME_SAMPLES
    persona: str | None = None
    model: str = ""
    device: str = ""
    conversation: int = 1  # 1 for the first on this connection, 2 after a reset, ...
    # Binary frames this connection sent before this conversation began: the frames from
    # this count on are the new conversation's (a reset drops what was still queued).
    frames_received: int = 0
    chunk_limit: int = 0
    context_window: int = 0
    # The most content tokens one span carries on the server's device (a block is never
    # split: what fits in its frame, measured); 0: not said (an older server).
    span_tokens: int = 0


@dataclass(frozen=True)
class Busy:
    TYPE: ClassVar[str] = "busy"
    message: str = "the engine holds another conversation"
    retry_after_s: float | None = None


@dataclass(frozen=True)
class Text:
    TYPE: ClassVar[str] = "text"
    delta: str = ""
    # Where a client rebuilt it from `words` (ours): the conversation's audio frames sent
    # before it, which say its frame as its arrival would have.
    audio: int | None = omitted_when_none()


@dataclass(frozen=True)
class UserText:
    TYPE: ClassVar[str] = "user_text"
    utt: int = 0  # the utterance's first frame: partials and the final share it
    final: bool = False
    t: float = 0.0  # seconds of user audio at the utterance's end
    text: str = ""


@dataclass(frozen=True)
class Words:
    """The words of a few frames in one message (ours, for a client that asked with
    WordsRequest; app/wire/words.py): the model's `text` and the recognition's `user_text`
    events, in their order, an item each. [delta, audio]: a `text` sent after `audio`
    frames of the conversation's audio. [utt, keep, text, t], with a fifth item 1 for an
    utterance's final: a `user_text` whose text is the first `keep` characters of its
    utterance's last, then `text`, so each recognised word is sent once (`user_text`
    resends the whole utterance with each: most of the bytes a conversation sent down)."""

    TYPE: ClassVar[str] = "words"
    items: list[Any] = field(default_factory=list)


@dataclass(frozen=True)
class Ret:
    TYPE: ClassVar[str] = "ret"
    frame: int = 0


@dataclass(frozen=True)
class Question:
    TYPE: ClassVar[str] = "question"
    text: str = ""
    ms: float = 0.0


@dataclass(frozen=True)
class SpanQueued:
    """The server took a client's span: it goes to the engine between two frames."""

    TYPE: ClassVar[str] = "span_queued"
    span_id: int = 0
    source: str = ""
    id: str | None = None  # the client's own id for it, echoed


@dataclass(frozen=True)
class SpanAccepted:
    TYPE: ClassVar[str] = "span_accepted"
    span_id: int = 0
    source: str = ""
    tokens: int = 0  # positions it takes in the model's context, wrapping included
    truncated: bool = False
    # The content's tokens before and after the model's limit (0: not said, an older
    # server), the limit in words, and when cut, the characters of the text it kept.
    content_tokens: int = 0
    kept_tokens: int = 0
    limit: str = ""
    read_chars: int | None = None


@dataclass(frozen=True)
class Span:
    """A span landed in the model's context."""

    TYPE: ClassVar[str] = "span"
    text: str = ""
    question: str = ""
    source: str = ""
    frames: int = 0  # positions it took (the reference's "frames": one per token)
    seconds: float = 0.0  # those positions in frame time
    prefill_ms: float = 0.0  # wall clock of its forward passes, all chunks together
    span_id: int = 0
    chunks: int = 1
    landed_frame: int = 0  # it was read before this frame
    origin_frame: int | None = None  # the <ret> it answers


@dataclass(frozen=True)
class SpanRejected:
    TYPE: ClassVar[str] = "span_rejected"
    span_id: int | None = None
    source: str = ""
    reason: str = ""
    id: str | None = None


@dataclass(frozen=True)
class NoSpan:
    TYPE: ClassVar[str] = "no_span"
    question: str = ""
    reason: str = ""


@dataclass(frozen=True)
class Late:
    TYPE: ClassVar[str] = "late"
    question: str = ""
    seconds: float = 0.0
    source: str = ""
    span_id: int | None = None
    dropped_by: str = ""  # "engine" (reached the frame loop too late) or "orchestrator"


@dataclass(frozen=True)
class Slot:
    TYPE: ClassVar[str] = "slot"
    prefill_ms: float = 0.0
    step_ms: float = 0.0
    total_ms: float = 0.0
    over_budget: bool = False
    span_id: int = 0


@dataclass(frozen=True)
class Voice:
    TYPE: ClassVar[str] = "voice"
    name: str = ""


@dataclass(frozen=True)
class AudioCodec:
    """The server's audio comes in `codec` from the next binary message on (the answer to
    AudioCodecRequest)."""

    TYPE: ClassVar[str] = "audio_codec"
    codec: str = PCM


@dataclass(frozen=True)
class Error:
    """stage: frame, message, span, persona, voice, engine, asr, retrieval, idle, limit,
    network or shutdown."""

    TYPE: ClassVar[str] = "error"
    stage: str = ""
    message: str = ""
    frame: int | None = None  # for a refused frame: its index among this connection's frames


ServerEvent = (
    Ready | Busy | Text | UserText | Words | Ret | Question | SpanQueued | SpanAccepted
    | Span | SpanRejected | NoSpan | Late | Slot | Voice | AudioCodec | Error
)
_SERVER_TYPES: dict[str, type[ServerEvent]] = registry((
    Ready, Busy, Text, UserText, Words, Ret, Question, SpanQueued, SpanAccepted, Span,
    SpanRejected, NoSpan, Late, Slot, Voice, AudioCodec, Error))
# The server's words, the model's and the user's: the link's text stream (the rest of its
# JSON is control: readiness, spans' lives, errors).
TEXT_EVENTS = frozenset({Text.TYPE, UserText.TYPE, Words.TYPE})


@dataclass(frozen=True)
class UnknownEvent:
    """A message this client does not know (a newer server): kept, never an error."""

    type: str
    data: dict[str, Any]


def encode_event(event: ServerEvent, compact: bool = False) -> str:
    """One event's JSON; `compact`: without the spaces after separators (for our own
    client, which asked for it with WordsRequest: the reference's page gets them)."""
    separators = (",", ":") if compact else None
    return json.dumps(to_json_object(event), ensure_ascii=False, separators=separators)


def decode_event(text: str | bytes) -> ServerEvent | UnknownEvent:
    """A server message as its type; fields it does not know are ignored."""
    obj = json.loads(text)
    if not isinstance(obj, dict):
        return UnknownEvent("", {"value": obj})
    try:
        event = from_json_object(obj, _SERVER_TYPES)
    except (NamedJsonError, TypeError):
        event = None
    return UnknownEvent(str(obj.get("type", "")), obj) if event is None else event


# ---- client -> server ------------------------------------------------------------------


@dataclass(frozen=True)
class SpanRequest:
    TYPE: ClassVar[str] = "span"
    text: str
    source: str = "client"
    id: str | None = None


@dataclass(frozen=True)
class ContextRequest:
    """Persona and the user's profile; applied only before the conversation's first frame."""

    TYPE: ClassVar[str] = "context"
    persona: str | None = None
    name: str | None = None
    city: str | None = None


@dataclass(frozen=True)
class VoiceRequest:
    TYPE: ClassVar[str] = "voice"
    name: str


@dataclass(frozen=True)
class ResetRequest:
    TYPE: ClassVar[str] = "reset"


ClientMessage = SpanRequest | ContextRequest | VoiceRequest | ResetRequest


@dataclass(frozen=True)
class AudioCodecRequest:
    """The client's audio choice for `/ws`. The server's codec answers it and never hands it
    to the conversation, so it is not a ClientMessage."""

    TYPE: ClassVar[str] = "audio_codec"
    codec: str = OPUS


@dataclass(frozen=True)
class WordsRequest:
    """The client's choice for `/ws` (ours, after `ready`): the model's and the
    recognition's words as `words`, each recognised word once and a few frames' in one
    message, instead of a `text` and a `user_text` (the whole utterance) a word; and every
    event's JSON without spaces. A server that does not know it answers an `error` and goes
    on as before. The server's codec takes it, so it is not a ClientMessage."""

    TYPE: ClassVar[str] = "words"


def encode_request(message: ClientMessage | AudioCodecRequest | WordsRequest) -> str:
    body = {k: v for k, v in to_json_object(message).items() if v is not None}
    return json.dumps(body, ensure_ascii=False)


def _text_field(obj: dict, key: str, limit: int, stage: str) -> str | None:
    value = obj.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise WireError(stage, f"{key} must be a string")
    if len(value) > limit:
        raise WireError(stage, f"{key} is {len(value)} characters: at most {limit}")
    return value


def _span(obj: dict) -> SpanRequest:
    text = obj.get("text")
    if not isinstance(text, str) or not text.strip():
        raise WireError("span", "a span needs a non-empty text")
    if len(text) > MAX_SPAN_CHARS:
        raise WireError("span", f"the span is {len(text)} characters: at most {MAX_SPAN_CHARS}")
    source = _text_field(obj, "source", MAX_SOURCE_CHARS, "span") or "client"
    if not source.isprintable():
        raise WireError("span", "the source must be printable text")
    ident = obj.get("id")
    if ident is not None and not isinstance(ident, (str, int)):
        raise WireError("span", "id must be a string or a number")
    ident_text = None if ident is None else str(ident)[:MAX_SOURCE_CHARS]
    return SpanRequest(text, source, ident_text)


def decode_request(text: str | bytes) -> ClientMessage:
    """A client's JSON message, checked; WireError says what is wrong with it."""
    try:
        obj = json.loads(text)
    except (UnicodeDecodeError, ValueError) as exc:
        raise WireError("message", f"not a JSON message: {exc}") from None
    except RecursionError:  # `[[[[…` a few KB deep: the decoder recurses once a level
        raise WireError("message", "the JSON is nested too deeply to be a message") from None
    if not isinstance(obj, dict):
        raise WireError("message", "a message is a JSON object with a type")
    kind = obj.get("type")
    if kind == "span":
        return _span(obj)
    if kind == "context":
        return ContextRequest(
            persona=_text_field(obj, "persona", MAX_PERSONA_CHARS, "persona"),
            name=_text_field(obj, "name", MAX_PROFILE_CHARS, "persona"),
            # The reference's page calls the city "location".
            city=(_text_field(obj, "city", MAX_PROFILE_CHARS, "persona")
                  or _text_field(obj, "location", MAX_PROFILE_CHARS, "persona")))
    if kind == "voice":
        name = obj.get("name")
        if not isinstance(name, str) or not _VOICE_NAME.fullmatch(name):
            raise WireError("voice", "a voice is named by letters, digits, - and _")
        return VoiceRequest(name)
    if kind == "reset":
        return ResetRequest()
    raise WireError("message", f"unknown message type {str(kind)[:40]!r}")


def decode_audio_codec_request(text: str | bytes) -> AudioCodecRequest | None:
    """The client's audio choice, if this message is one (None: another message, or not
    JSON: decode_request says what is wrong with it). WireError for a codec not offered."""
    try:
        obj = json.loads(text)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    if not isinstance(obj, dict) or obj.get("type") != AudioCodecRequest.TYPE:
        return None
    codec = obj.get("codec")
    if codec not in AUDIO_CODECS:
        raise WireError("message", f"unknown audio codec {str(codec)[:40]!r}: "
                                   f"{' or '.join(AUDIO_CODECS)}")
    return AudioCodecRequest(codec)


def is_words_request(text: str | bytes) -> bool:
    """Whether this client message asks for `words` (WordsRequest)."""
    try:
        obj = json.loads(text)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return False
    return isinstance(obj, dict) and obj.get("type") == WordsRequest.TYPE
