"""Untrusted text made safe to show: bidirectional controls drawn as visible marks.

A file name, a web page or an LLM answer may carry Unicode's bidi controls (U+202E RIGHT-TO-LEFT
OVERRIDE and its kin). Drawn as they are, they reorder what follows them: a dropped file named
"report\u202egpj.exe" reads "reportexe.jpg" in the transcript and in an export. What is shown (the
transcript panel, the context panel, notices, exported Markdown and plain text) goes through
`visible_controls`, which writes each control as `<U+202E>`; what is stored (entries, the JSON
transcript) keeps the original text, so nothing the user or a file gave is lost.
"""

from __future__ import annotations

# The explicit embeddings and overrides (U+202A-U+202E), the isolates (U+2066-U+2069), the
# marks (U+200E LRM, U+200F RLM, U+061C ALM).
BIDI_CONTROLS = frozenset(
    [*map(chr, range(0x202A, 0x202F)), *map(chr, range(0x2066, 0x206A)),
     "\u200e", "\u200f", "\u061c"])
_SHOWN = {ord(c): f"<U+{ord(c):04X}>" for c in BIDI_CONTROLS}


def visible_controls(text: str) -> str:
    """`text` with every bidi control replaced by its visible name (`<U+202E>`); text
    without one comes back as it is (the same object)."""
    if not BIDI_CONTROLS.intersection(text):
        return text
    return text.translate(_SHOWN)


def has_bidi_controls(text: str) -> bool:
    return bool(BIDI_CONTROLS.intersection(text))
