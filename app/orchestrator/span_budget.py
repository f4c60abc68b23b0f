"""How long an answer may be: the engine's span budget in tokens, as the LLM is told it.

A span block is never split, so on a given device the longest span is what the engine
measured to fit in the 80 ms frame at warm-up (EngineReady.span_tokens). The LLM hears it in
its system prompt, and the answer is cut to it (about three characters a token) in case it
did not listen."""

from __future__ import annotations

CHARS_PER_TOKEN = 3  # the speech models' SentencePiece, on English prose


def span_chars(tokens: int) -> int:
    """The characters an answer of `tokens` tokens holds, about."""
    return max(1, tokens * CHARS_PER_TOKEN)


def budget_instruction(tokens: int) -> str:
    """The sentence the LLM's system prompt ends with (empty: no budget known)."""
    if tokens <= 0:
        return ""
    words = max(1, tokens * 3 // 4)
    return (f"The speech model reads your reply in one piece of at most {tokens} tokens "
            f"(about {words} words): keep it within that.")
