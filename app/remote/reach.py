"""Is anything there at the speech server's address? Said in words a person can act on.

The network library words a refused connection as "Cannot connect to host 127.0.0.1:8999
ssl:default [Connect call failed ('127.0.0.1', 8999)]", and a server that accepts a
connection and never answers as nothing at all. The OSError behind a failure tells the
common cases apart (refused, unknown name, no route, no answer, a reset), each with what to
do: at Start and in Settings' Test (app/conversation/server_reach.py: one plain connection
first), and when a running conversation's link fails (remote_engine.describe).
"""

from __future__ import annotations

import errno
import socket
from urllib.parse import urlsplit

START_IT = "start it there with `python main.py serve`"
NO_ROUTE = (errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EHOSTDOWN)


def host_and_port(url: str) -> tuple[str, int]:
    """`host:port`, `http(s)://…` or `ws(s)://…` -> (host, port); ValueError if it is none."""
    text = url.strip()
    parts = urlsplit(text if "://" in text else f"http://{text}")
    if not parts.hostname:
        raise ValueError(f"not a server address: {url!r} (e.g. http://gpu-box:8998)")
    secure = parts.scheme in ("https", "wss")
    try:
        port = parts.port
    except ValueError as exc:  # a port out of range or not a number
        raise ValueError(f"not a server address: {url!r} ({exc})") from None
    return parts.hostname, port or (443 if secure else 80)


def unreachable_words(error: OSError, host: str, port: int, timeout_s: float,
                      where: str = "") -> str:
    """Why nothing could be reached at host:port, and what to do. `where`: where the user
    gives the address ("Settings → Speech model → Speech engine"), said after "correct"."""
    fix = f"correct the address in {where}" if where else "correct the address"
    at = f"{host}:{port}"
    if isinstance(error, socket.gaierror):
        return (f"The computer name “{host}” is not known on this network (a typo, or a name "
                f"only another network knows): {fix}, or use the machine's IP address.")
    if isinstance(error, ConnectionRefusedError):
        return (f"Nothing answers at {at}: no speech server runs there, or it listens on "
                f"another port. If it should, {START_IT}; else {fix}.")
    if isinstance(error, TimeoutError):
        return (f"{at} did not take the connection within {timeout_s:g} s: the machine may "
                f"be off, or a firewall drops the connection. Check that it is up and the "
                f"port is open, or {fix}.")
    if isinstance(error, ConnectionResetError) or error.errno == errno.ECONNRESET:
        tls = (" An https:// or wss:// address talks TLS: if the server was started without "
               "--ssl-cert, use http://." if port == 443 or "https" in where else "")
        return (f"{at} took the connection and closed it at once: it is not a speech server, "
                f"or it speaks another protocol.{tls} {fix[0].upper()}{fix[1:]}.")
    if error.errno in NO_ROUTE:
        return (f"{host} cannot be reached from this computer (no route to it): check the "
                f"network, or {fix}.")
    reason = error.strerror or type(error).__name__
    return f"{at} cannot be reached ({reason}): check the network, or {fix}."


def reach_problem(url: str, timeout_s: float, where: str = "") -> str | None:
    """None when something takes a connection at `url`'s host and port (it may still not be
    a speech server); else why not, in words."""
    try:
        host, port = host_and_port(url)
    except ValueError as exc:
        return f"{str(exc)[0].upper()}{str(exc)[1:]}."
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return None
    except OSError as exc:  # TimeoutError and socket.gaierror are OSErrors too
        return unreachable_words(exc, host, port, timeout_s, where)
