"""When to ask the LLM: at the end of a user turn, and mid-turn once a question is clear."""

from __future__ import annotations

import re

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
