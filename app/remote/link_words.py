"""What happened to the connection to the speech server, in words that are true: a server
killed mid-conversation (no close frame: 1006) did not "close the connection", a busy
server is said once, not twice in other words."""

from __future__ import annotations

from aiohttp import WSCloseCode

from app.remote.events import NetworkStats
from app.wire import events as wire


def describe_disconnect(code: int | None, reason: str = "") -> str:
    """Why the connection ended, from its WebSocket close code and the server's reason."""
    said = reason.strip()
    said = "" if said in ("", "closed") else said
    if code is None or code == WSCloseCode.ABNORMAL_CLOSURE:
        return ("the connection broke without a word from the server (close code 1006): the "
                "server stopped or crashed, or the network between you dropped")
    if code == WSCloseCode.GOING_AWAY:
        return "the server is shutting down (close code 1001)"
    if code == WSCloseCode.INTERNAL_ERROR:
        return f"the server's engine failed (close code 1011){': ' + said if said else ''}"
    if code == WSCloseCode.TRY_AGAIN_LATER:
        return "the server is busy (close code 1013)"
    if code == WSCloseCode.MESSAGE_TOO_BIG:
        return "the server refused a message as too big (close code 1009)"
    if code == WSCloseCode.OK:
        return (f"the server ended the conversation: {said}" if said
                else "the server ended the conversation")
    return f"the server closed the connection (close code {code}){': ' + said if said else ''}"


def describe_busy(host: str, busy: wire.Busy) -> str:
    """A server with no free conversation slot, and when to try again. The server's own
    message is kept only where it adds something (ours says the same as this)."""
    retry = busy.retry_after_s
    when = (f"; try again in {retry:g} s" if isinstance(retry, (int, float)) and retry > 0
            else "; try again later")
    message = " ".join(busy.message.split())
    known = ("", "the server is busy", wire.Busy().message)
    adds = message and not any(message.startswith(k) for k in known if k) and (
        "another conversation" not in message)
    extra = f" (it says: {message[:200]})" if adds else ""
    return f"the speech server at {host} holds all the conversations it can{extra}{when}"


def slow_link_notice(stats: NetworkStats) -> str:
    """Frames came back too late to play: whose fault it is (the network's round trip or
    the frame's time at the server, whichever is the larger), in the figures that say it."""
    network, server = stats.network_rtt_ms, stats.server_ms
    parts = []
    if network is not None:
        parts.append(f"network round trip {network:.0f} ms")
    if server is not None:
        parts.append(f"{server:.0f} ms a frame at the server")
    figures = f" ({', '.join(parts)})" if parts else ""
    if network is not None and server is not None and server > network:
        who = "The speech server is slow: its frames wait there"
    else:
        who = "The connection to the speech server is slow"
    return (f"{who}{figures}; {stats.late_frames} audio frames came back too late to be "
            "played on time. The conversation goes on; the model's voice may skip until it "
            "recovers.")
