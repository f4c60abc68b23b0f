"""The shared token: `?token=` in the URL or an `Authorization: Bearer` header.

Compared in constant time, so the answer's timing says nothing about how much of a guess
was right. No token configured: every request is let in (the CLI refuses that on any
address but the loopback unless asked to).
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable, Iterator, Mapping


def presented_token(headers: Mapping[str, str], query: Mapping[str, str]) -> str | None:
    """The token a request carries: the Authorization header first, else `?token=`."""
    header = headers.get("Authorization") or headers.get("authorization") or ""
    scheme, _, value = header.strip().partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    token = query.get("token")
    return token if token else None


def token_matches(presented: str | None, expected: str | None) -> bool:
    """Header bytes that are not UTF-8 reach us as lone surrogates (aiohttp decodes with
    surrogateescape): encoded back the same way they are a wrong token, never an error."""
    if not expected:
        return True
    if presented is None:
        return False
    return hmac.compare_digest(presented.encode("utf-8", "surrogateescape"),
                               expected.encode("utf-8", "surrogateescape"))


class AsgiHeaders(Mapping[str, str]):
    """An ASGI request's header bytes read as aiohttp (`serve`) reads them: UTF-8, bytes that
    are not as lone surrogates, names in any case. Starlette reads them as Latin-1, so a token
    with a letter beyond ASCII would open `serve` and not the cluster's replicas."""

    def __init__(self, raw: Iterable[tuple[bytes, bytes]]) -> None:
        self._values: dict[str, str] = {}
        for name, value in raw:  # the first of a repeated header, as aiohttp's get()
            self._values.setdefault(name.decode("latin-1").lower(),
                                    value.decode("utf-8", "surrogateescape"))

    def __getitem__(self, name: str) -> str:
        return self._values[name.lower()]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)
