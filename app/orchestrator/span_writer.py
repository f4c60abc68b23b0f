"""Turn the LLM's answer into a short, speakable span of plain text."""

from __future__ import annotations

import re

from app.cuts import Cut

_MARKDOWN = [
    (re.compile(r"```.*?```", re.DOTALL), " "),  # code blocks are not speakable
    (re.compile(r"!\[[^\]]*\]\([^)]*\)"), " "),  # images
    (re.compile(r"\[([^\]]+)\]\([^)]*\)"), r"\1"),  # links keep their text
    (re.compile(r"^\s{0,3}#{1,6}\s*", re.MULTILINE), ""),  # headings
    (re.compile(r"^\s*[-*+]\s+", re.MULTILINE), ""),  # bullets
    # Emphasis and inline code keep their text; a lone "*" (as in 6*7) is left alone.
    (re.compile(r"(\*\*|__)(\S(?:.*?\S)?)\1"), r"\2"),
    (re.compile(r"(?<![\w*])\*(\S(?:.*?\S)?)\*(?![\w*])"), r"\1"),
    (re.compile(r"`([^`]+)`"), r"\1"),
    (re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE), " "),  # reasoning traces
]


def speakable_span_cut(answer: str, max_chars: int, what: str = "the LLM's reply"
                      ) -> tuple[str, tuple[Cut, ...]]:
    """`speakable_span`, and the cut when `max_chars` took some of it: sizes from the raw
    `answer` (what the LLM or the tool gave) to the span's text."""
    whole = _plain(answer)  # markdown and spaces out, not cut (the patterns run once)
    text = _cut(whole, max_chars)
    if text == whole:
        return whole, ()
    return text, (Cut(what, len(answer), len(text), "characters",
                      f"an answer is cut to {max_chars:,} characters, what the speech "
                      "model reads of one span"),)


def speakable_span(answer: str, max_chars: int) -> str:
    """Plain text, whitespace collapsed, cut at a sentence end within `max_chars`."""
    return _cut(_plain(answer), max_chars)


def _plain(answer: str) -> str:
    text = answer
    for pattern, replacement in _MARKDOWN:
        text = pattern.sub(replacement, text)
    return " ".join(text.split())


def _cut(text: str, max_chars: int) -> str:
    if len(text) <= max_chars:
        return text
    cut = text[:max_chars]
    end = max(cut.rfind(". "), cut.rfind("? "), cut.rfind("! "))
    if end >= max_chars // 2:
        return cut[: end + 1]
    return cut.rsplit(" ", 1)[0] + "…"
