"""Is anything there at the speech server's address? Said in words a person can act on.

The speech server's client reports a refused connection as the network library words it
("Cannot connect to host 127.0.0.1:8999 ssl:default [Connect call failed ('127.0.0.1',
8999)]"), and a server that accepts a connection and never answers as nothing at all
("Cannot reach http://127.0.0.1:11700: ."). One plain TCP connection, made first, tells the
common cases apart from the real exception (refused, unknown name, no route, no answer) and
says what to do about each; what answers is then asked as before (app/remote/probe.py).
"""

from __future__ import annotations

from app.remote.probe import ServerProbe, base_url, probe_server
from app.remote.reach import host_and_port, reach_problem, unreachable_words

__all__ = ["check_speech_server", "host_and_port", "reach_problem", "unreachable_words"]

def check_speech_server(url: str, token: str | None, timeout_s: float = 5.0) -> ServerProbe:
    """Settings → Speech engine → Test connection: first whether anything is there (in
    words), then the server's own answer (probe_server); never raises for the network."""
    problem = reach_problem(url, timeout_s, "the field above")
    if problem is not None:
        return ServerProbe(False, problem)
    result = probe_server(url, token, timeout_s)
    base = base_url(url)
    if not result.ok and result.message == f"Cannot reach {base}: .":
        # It took the connection (above) and then said nothing: the probe's timeout.
        return ServerProbe(False, (
            f"{base} takes connections but sent no answer within {timeout_s:g} s. A speech "
            "server that is still loading its model answers once it is ready: try again in "
            "a minute. If it does not, this address is another program's: correct it."))
    return result
