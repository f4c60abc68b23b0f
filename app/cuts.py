"""What a bound took out of a text on its way to the speech model, said with its sizes.

A span passes several bounds between what the user or the LLM gave and what the model reads:
the LLM's reply cut to the span's length, a tool's output cut to its limit, a pasted text cut
to what may be read or sent, the content cut to the checkpoint's token limit. Each one that
cuts records a `Cut`, which travels with the span (in the orchestrator's and the engine's
events) to its transcript entry, so none of them is silent.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Cut:
    what: str  # what was cut, as a reader names it: "the LLM's reply", "web_fetch's result"
    before: int | None  # None: more than `after`, how much more is unknown (not read)
    after: int
    unit: str  # "characters" or "tokens"
    bound: str  # which bound cut it: "the span's 1,536-character bound"

    def describe(self) -> str:
        """`the LLM's reply cut: 5,000,000 → 1,536 characters (the span's …-character
        bound)`."""
        before = f"more than {self.after:,}" if self.before is None else f"{self.before:,}"
        return f"{self.what} cut: {before} → {self.after:,} {self.unit} ({self.bound})"


def cut_if_longer(what: str, text: str, limit: int, bound: str) -> tuple[str, Cut | None]:
    """`text` cut to its first `limit` characters, and the cut (None when it fit)."""
    if len(text) <= limit:
        return text, None
    return text[:limit], Cut(what, len(text), limit, "characters", bound)


def describe_read(read_chars: int, total_chars: int) -> str:
    """The line a span's entry carries when the model read only the start of its text."""
    return f"the model read the first {read_chars:,} of {total_chars:,} characters"
