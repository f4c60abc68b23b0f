"""Settings → Speech engine → "Test connection": is the server there, does it take the
token, is it free, and how long a round trip takes.

It asks `/health` (open to all: the model, whether the engine is busy) a few times for the
round trip, and `/metrics` with the token (401 without the right one). It never opens a
conversation: that would take the server's one engine slot and warm up a model. Blocking:
the dialog runs it on the thread pool.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import aiohttp

PINGS = 3


@dataclass(frozen=True)
class ServerProbe:
    ok: bool
    message: str
    rtt_ms: float | None = None  # median of the /health round trips
    model: str = ""
    busy: bool = False


def base_url(url: str) -> str:
    """`host:port`, `http(s)://host:port[/ws]` or `ws(s)://...` -> `http(s)://host:port`."""
    text = url.strip()
    parts = urlsplit(text if "://" in text else f"http://{text}")
    scheme = {"ws": "http", "wss": "https"}.get(parts.scheme, parts.scheme)
    if scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"not a server address: {url!r} (e.g. http://gpu-box:8998)")
    path = parts.path.rstrip("/").removesuffix("/ws")
    return urlunsplit((scheme, parts.netloc, path, "", ""))


def probe_server(url: str, token: str | None, timeout_s: float = 5.0) -> ServerProbe:
    """The server's answer in words; never raises for a network problem."""
    try:
        base = base_url(url)
    except ValueError as exc:
        return ServerProbe(False, str(exc))
    try:
        return asyncio.run(asyncio.wait_for(_probe(base, token, timeout_s), timeout_s * 2))
    except asyncio.TimeoutError:
        return ServerProbe(False, f"No answer from {base} within {timeout_s * 2:g} s.")


async def _probe(base: str, token: str | None, timeout_s: float) -> ServerProbe:
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    try:
        async with aiohttp.ClientSession(timeout=timeout) as session:
            rtts: list[float] = []
            health: dict = {}
            for _ in range(PINGS):
                started = time.perf_counter()
                async with session.get(f"{base}/health") as response:
                    if response.status != 200:
                        return ServerProbe(False, f"{base} is not a ContextSpan speech server "
                                                  f"(/health answered HTTP {response.status}).")
                    health = await response.json(content_type=None)
                rtts.append((time.perf_counter() - started) * 1000.0)
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            async with session.get(f"{base}/metrics", headers=headers) as response:
                status = response.status
    except aiohttp.ContentTypeError:
        return ServerProbe(False, f"{base} answered, but not as a ContextSpan speech server.")
    except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as exc:
        return ServerProbe(False, f"Cannot reach {base}: {exc or type(exc).__name__}.")
    rtt = statistics.median(rtts)
    model = str(health.get("model", "")) if isinstance(health, dict) else ""
    if status == 401:
        what = "the token was refused" if token else "it needs a token"
        return ServerProbe(False, f"{base} answered in {rtt:.0f} ms, but {what} (401).",
                           rtt, model)
    busy = bool(health.get("busy")) if isinstance(health, dict) else False
    device = health.get("device", "") if isinstance(health, dict) else ""
    state = " It is busy with another conversation now." if busy else ""
    if isinstance(health, dict) and health.get("status") == "error":
        return ServerProbe(False, f"{base} answered in {rtt:.0f} ms, but its engine is stuck: "
                                  f"{health.get('message', 'restart the server')}.", rtt, model)
    return ServerProbe(True, f"Connected: {model} on {device}, round trip {rtt:.0f} ms.{state}",
                       rtt, model, busy)
