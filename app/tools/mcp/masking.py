"""Secrets out of what we say: a server's env and header values never reach the log, the
window or a transcript, even when a server prints them or an error message quotes them."""

from __future__ import annotations

from collections.abc import Sequence

MASK = "•••"


def mask(text: str, secrets: Sequence[str]) -> str:
    """`text` with every secret value replaced by •••. `secrets`: longest first (a secret
    that contains another is masked whole)."""
    for secret in secrets:
        if secret and secret in text:
            text = text.replace(secret, MASK)
    return text
