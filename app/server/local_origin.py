"""Who may use a server that has no token: only the computer it runs on.

A server on the loopback without a token trusts whoever can reach it, and that includes every
web page the user opens: a browser lets any page open a WebSocket to 127.0.0.1 (sending the
page's Origin, or `null` from a sandboxed frame or a file), and a DNS-rebinding page reaches
the same port under its own host name. Such a server therefore answers a request only when its
Host is a loopback name and its Origin, when there is one, is a loopback origin too. A client
that is not a browser (moshi's, ours) sends no Origin and the loopback Host it connected to.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from urllib.parse import urlsplit

LOOPBACK_NAMES = ("localhost",)


def is_loopback_name(name: str) -> bool:
    """127.0.0.0/8, ::1 or localhost (a name in brackets is an IPv6 address)."""
    name = name.strip().strip("[]").rstrip(".").lower()
    if name in LOOPBACK_NAMES or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def _host_of(authority: str) -> str:
    """The host of `host[:port]` or `[v6]:port`."""
    authority = authority.strip()
    if authority.startswith("["):
        return authority[1:].split("]", 1)[0]
    return authority.rsplit(":", 1)[0] if authority.count(":") == 1 else authority


def foreign_request(headers: Mapping[str, str]) -> str | None:
    """Why a request to a tokenless loopback server is refused, or None when it comes from
    this computer. Values are quoted shortened: they are the sender's."""
    host = headers.get("Host", "")
    if not is_loopback_name(_host_of(host)):
        return f"the Host {host[:80]!r} is not this computer"
    origin = headers.get("Origin")
    if origin is None:
        return None
    if origin.strip().lower() == "null":
        return "a page with no origin (Origin: null)"
    try:
        origin_host = urlsplit(origin.strip()).hostname or ""
    except ValueError:
        origin_host = ""
    if not is_loopback_name(origin_host):
        return f"a web page from {origin[:80]!r}"
    return None


def refusal(headers: Mapping[str, str], token: str | None, server_host: str) -> str | None:
    """What a server listening on `server_host` answers (403) to a request from elsewhere
    when it has no token, or None when the request may go on (to the token check). The one
    rule of `serve` and of `serve --cluster`'s front door and replicas."""
    if token or not is_loopback_name(server_host):
        return None
    why = foreign_request(headers)
    if why is None:
        return None
    return (f"refused: {why}. A server without a token answers only this computer; start it "
            "with --token to share it.")
