"""Why a server address typed in Settings cannot be used, said as it is typed: the one rule
the LLM's host and the speech server's URL share (their schemes and examples differ)."""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import urlsplit


def address_problem(address: str, schemes: Sequence[str], example: str,
                    bare_host_scheme: str | None = None) -> str | None:
    """None when `address` (stripped, not empty) is a URL of one of `schemes` that names a
    host and a valid port. `bare_host_scheme`: the scheme a `host:port` without one means
    (None: a scheme is needed). `example`: "for example …", quoted in the answers."""
    if any(char.isspace() for char in address):
        return "A server address has no spaces."
    if bare_host_scheme is not None and "://" not in address:
        address = f"{bare_host_scheme}://{address}"
    parts = urlsplit(address)
    if parts.scheme.lower() not in schemes:
        named = ", ".join(f"{scheme}://" for scheme in schemes[:-1])
        return f"The address must start with {named} or {schemes[-1]}://, {example}."
    if not parts.hostname:
        return f"The address names no server after {parts.scheme}://, {example}."
    try:
        parts.port  # noqa: B018 - reading it checks it
    except ValueError:
        return "The port after the server's name must be a number from 0 to 65535."
    return None
