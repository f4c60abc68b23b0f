"""The user's permission for a server's tool that changes things.

MCP servers describe their tools with hints: `readOnlyHint` (it only reads) and
`destructiveHint` (it may destroy). A tool not marked read-only, or marked destructive,
needs permission; each server's setting says how: "always" (it runs), "never" (it is
refused, and the LLM is told so) or "ask" (the default: the window asks, each time, or once
for the rest of the session).

Asking never stops the conversation: the call waits on the LLM turn's own thread (the frame
loop, the recogniser and the window go on), the voice is told to wait, and the request ends
on the user's answer, the turn's cancel, or after `timeout_s` (refused). Nobody can be asked
without a window: a headless run (`run`, `serve`, `eval`) refuses such a call at once and
says how to allow it ("consent": "always" in the mcpServers file).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

Decision = Literal["allow", "allow_session", "deny"]
ASK_TIMEOUT_S = 120.0
_POLL_S = 0.1  # how often a waiting call looks at its turn's cancel


def needs_consent(read_only: bool | None, destructive: bool | None) -> bool:
    """A tool changes things unless its server marks it read-only and not destructive."""
    return read_only is not True or destructive is True


@dataclass(frozen=True)
class ConsentRequest:
    request_id: int
    server: str
    tool: str  # the server's own name for it
    description: str
    arguments: Mapping[str, Any]
    asked_at: float  # monotonic


@dataclass(frozen=True)
class ConsentAnswer:
    allowed: bool
    reason: str = ""  # when refused: why, in words the LLM and the transcript get


@dataclass
class _Waiting:
    request: ConsentRequest
    decision: Decision | None = None
    done: threading.Event = field(default_factory=threading.Event)


class ConsentBroker:
    """Where calls wait for the user's answer, and where the window's prompt finds them.

    Thread-safe: `ask` blocks a tool call's thread (bounded); the prompt (GUI thread) reads
    `pending()` and calls `answer()`. `version` grows with every change, so a prompt that
    polls redraws only when something happened."""

    def __init__(self, timeout_s: float = ASK_TIMEOUT_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.timeout_s = timeout_s
        self._clock = clock
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._waiting: dict[int, _Waiting] = {}
        self._session_grants: set[str] = set()
        self._prompts = 0  # windows attached that can ask the user
        self.version = 0

    def attach_prompt(self) -> Callable[[], None]:
        """A window that shows requests and answers them; returns its detach."""
        with self._lock:
            self._prompts += 1
            self.version += 1
        detached = threading.Event()

        def detach() -> None:
            if detached.is_set():
                return
            detached.set()
            with self._lock:
                self._prompts -= 1
                self.version += 1
                orphans = [] if self._prompts else list(self._waiting.values())
            for waiting in orphans:  # nobody is left to answer them
                waiting.done.set()

        return detach

    def can_ask(self) -> bool:
        with self._lock:
            return self._prompts > 0

    def granted_for_session(self, server: str) -> bool:
        with self._lock:
            return server in self._session_grants

    def pending(self) -> tuple[ConsentRequest, ...]:
        with self._lock:
            return tuple(w.request for w in self._waiting.values() if w.decision is None)

    def answer(self, request_id: int, decision: Decision) -> None:
        with self._lock:
            waiting = self._waiting.get(request_id)
            if waiting is None or waiting.decision is not None:
                return
            waiting.decision = decision
            if decision == "allow_session":
                self._session_grants.add(waiting.request.server)
            self.version += 1
        waiting.done.set()

    def ask(self, server: str, tool: str, description: str, arguments: Mapping[str, Any],
            cancel: threading.Event | None = None) -> ConsentAnswer:
        """Block until the user answers, the call is cancelled, or the time is up."""
        if self.granted_for_session(server):
            return ConsentAnswer(True)
        with self._lock:
            if not self._prompts:
                return ConsentAnswer(False, f"{tool} on {server} changes things and needs "
                                     "the user's permission, and no one can be asked here "
                                     "(a run without a window): allow it with \"consent\": "
                                     "\"always\" for this server")
            request = ConsentRequest(next(self._ids), server, tool, description,
                                     dict(arguments), self._clock())
            waiting = self._waiting[request.request_id] = _Waiting(request)
            self.version += 1
        try:
            deadline = self._clock() + self.timeout_s
            while not waiting.done.wait(_POLL_S):
                if cancel is not None and cancel.is_set():
                    return ConsentAnswer(False, "the request was cancelled before the user "
                                         "answered")
                if self._clock() >= deadline:
                    return ConsentAnswer(False, f"the user did not answer within "
                                         f"{self.timeout_s:g} s")
            decision = waiting.decision
        finally:
            with self._lock:
                self._waiting.pop(request.request_id, None)
                self.version += 1
        if decision is None:
            return ConsentAnswer(False, "the window that asked was closed")
        if decision == "deny":
            return ConsentAnswer(False, f"the user did not allow {tool} on {server}")
        return ConsentAnswer(True)


_shared: ConsentBroker | None = None
_shared_lock = threading.Lock()


def shared_broker() -> ConsentBroker:
    """The process's broker: the window's prompt attaches to it, the app's MCP tools ask
    it. (One per process, like the servers it guards: see hub.py.)"""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = ConsentBroker()
        return _shared
