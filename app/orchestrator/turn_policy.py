"""When to ask the LLM: at the end of a user turn, and mid-turn once a question is clear;
when the user's new words make the turn in flight stale (a barge-in)."""

from __future__ import annotations

import re

from app.asr.events import AsrPartial

_QUESTION_START = re.compile(
    r"^(what|who|whom|whose|when|where|why|how|which|is|are|was|were|can|could|would|will|"
    r"should|do|does|did|tell me|search|look up|find)\b",
    re.IGNORECASE,
)


def normalize(text: str) -> str:
    return " ".join(re.sub(r"[^\w\s]", " ", text.lower()).split())


def is_clear_question(partial: str, min_words: int = 4) -> bool:
    """A partial utterance that already reads as a complete question: it ends with a
    question mark (the STT punctuates) and starts like one, with enough words."""
    text = partial.strip()
    words = normalize(text).split()
    return text.endswith("?") and len(words) >= min_words and bool(_QUESTION_START.match(text))


def user_spoke(partial: AsrPartial) -> bool:
    """Whether a partial utterance is the user speaking, so that it may cancel the turn in
    flight or start one: with a voice-activity detector on, only if it heard speech in the
    utterance (a recogniser makes words of silence and noise too: a tiny random one on
    silence, real ones on noise, and a tool's answer would be thrown away mid-call); without
    one, the words are all there is to go by."""
    return partial.voiced is not False
