"""Quoting user or file data in a message, bounded.

A notice that quotes what a file or a user gave it (a key name, a value, a path, a parser's
error) must stay readable whatever that data is: a 10 MB key name in settings.json once made
a 10-million-character notice. Every such quote goes through `bounded`, which keeps the start
and says how much was cut, so nothing is cut silently.
"""

from __future__ import annotations

QUOTE_LIMIT = 120  # characters of one quoted piece of data
NOTICE_LIMIT = 2000  # characters of a whole notice that quotes data


def bounded(text: str, limit: int = QUOTE_LIMIT) -> str:
    """`text` as it is when it has at most `limit` characters; else its first `limit`
    characters and "… (cut: N more characters)"."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… (cut: {len(text) - limit:,} more characters)"
