"""Abort an HTTP request in flight by shutting its socket down, from any thread.

Closing an httpx response from another thread does not wake a thread blocked in `recv()`
(and a server that has not sent its headers yet gives us no response to close at all). A
socket `shutdown()` does: the blocked read returns at once and the server sees the
connection closed. To know which socket a request uses, the backends' httpx clients carry
`client_options()`: a request hook hands each request an httpcore `trace` callback that
records the connection's stream as it is opened, and keep-alive is off so every request
opens its own connection (an LLM request lasts seconds; one more local connect is nothing).

    with abortable(cancel):      # on the thread that makes the request
        client.post(...)         # cancel.set() anywhere ends it at once
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

import httpx

_OPENED = ("connection.connect_tcp.complete", "connection.start_tls.complete")
_local = threading.local()  # the abortable scope of the request this thread is making


class RequestAbort:
    """The sockets one request opened, and whether it was aborted."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._streams: list[Any] = []
        self.aborted = False

    def trace(self, event: str, info: dict[str, Any]) -> None:
        """httpcore's trace extension (called on the requesting thread)."""
        if event not in _OPENED:
            return
        stream = info.get("return_value")
        with self._lock:
            self._streams.append(stream)
            aborted = self.aborted
        if aborted:  # cancelled while connecting: hang up as soon as we can
            _shut(stream)

    def abort(self) -> None:
        with self._lock:
            self.aborted = True
            streams = list(self._streams)
        for stream in streams:
            _shut(stream)


def _shut(stream: Any) -> None:
    sock = stream.get_extra_info("socket") if stream is not None else None
    if sock is None:
        return
    with contextlib.suppress(OSError):  # already closed, or a TLS wrapper's detached socket
        # The plain socket's shutdown, also for a TLS socket: no TLS state is touched from
        # this thread, the reading thread just sees the end of the stream.
        socket.socket.shutdown(sock, socket.SHUT_RDWR)


def _add_trace(request: httpx.Request) -> None:
    scope = getattr(_local, "scope", None)
    if scope is not None:
        request.extensions["trace"] = scope.trace


def client_options() -> dict[str, Any]:
    """Keyword arguments for an `httpx.Client` whose requests `abortable` can abort."""
    return {
        "event_hooks": {"request": [_add_trace]},
        "limits": httpx.Limits(max_keepalive_connections=0),
    }


@contextlib.contextmanager
def abortable(cancel: threading.Event | None) -> Iterator[RequestAbort]:
    """Requests made on this thread inside the block are aborted when `cancel` is set."""
    scope = RequestAbort()
    previous = getattr(_local, "scope", None)
    _local.scope = scope
    forget = _watch(cancel, scope.abort)
    try:
        yield scope
    finally:
        forget()
        _local.scope = previous


@contextlib.contextmanager
def cancellable(cancel: threading.Event | None) -> Iterator[None]:
    """A backend's request: refused when already cancelled, aborted when `cancel` is set,
    and whatever error the abort causes (a broken read) reads as a cancelled request."""
    from app.llm.backend import LLMError, check_cancel

    check_cancel(cancel)
    with abortable(cancel):
        try:
            yield
        except Exception as exc:
            if cancel is not None and cancel.is_set():  # the abort broke the read
                raise LLMError("cancelled", "The LLM request was cancelled.") from exc
            raise


def _watch(cancel: threading.Event | None, abort: Callable[[], None]) -> Callable[[], None]:
    """Run `abort` when `cancel` is set; returns the function that stops watching."""
    if cancel is None:
        return lambda: None
    on_set = getattr(cancel, "on_set", None)
    if callable(on_set):  # a CancelEvent calls back: no thread needed
        return on_set(abort)
    done = threading.Event()  # a plain Event: a small watcher notices within 50 ms

    def watch() -> None:
        while not done.is_set():
            if cancel.wait(0.05):
                abort()
                return

    threading.Thread(target=watch, name="llm-cancel-watch", daemon=True).start()
    return done.set
