"""The interface every LLM backend implements, and the typed messages it exchanges.

A backend is one file (`ollama_backend.py`, `openai_compat_backend.py`); adding one touches
no other backend. Every call has a timeout; failures raise `LLMError` with a kind the UI can
show ("Ollama is not running at ...", "model not found", ...).
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

Role = Literal["system", "user", "assistant", "tool"]
ErrorKind = Literal["unreachable", "timeout", "http", "malformed", "model_missing", "cancelled"]


@dataclass(frozen=True)
class BackendChoice:
    """The server and model chosen for a backend, as each backend's factory takes it (its
    row in app/llm_backends.py names the factory; app/llm/factory.py calls it)."""

    host: str | None  # the server's address; None or "": the backend's default, if it has one
    model: str | None  # None or "": the backend's default
    timeout_s: float  # the longest silence while waiting for a reply
    connect_timeout_s: float
    temperature: float | None  # None: the server's default
    api_key: str | None  # None: the backend's own way (OPENAI_API_KEY)
    flag: str  # the setting an error message asks for ("--llm-host", "--judge-host")


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: Mapping[str, Any]  # parsed JSON object; treat as read-only


@dataclass(frozen=True)
class ToolSpec:
    """A tool as the LLM sees it: a name, what it does, and its JSON-schema parameters."""

    name: str
    description: str
    parameters: Mapping[str, Any]


@dataclass(frozen=True)
class ChatMessage:
    role: Role
    content: str
    tool_name: str | None = None  # role == "tool": which tool produced this content
    tool_calls: tuple[ToolCall, ...] = ()  # role == "assistant": the calls it asked for


# The stand-in Ollama scripts its time and says so in this reply header (a real server never
# sends it): a replay counts the declared time, not the machine's (orchestrator/replay_clock.py).
DECLARED_LATENCY_HEADER = "X-Standin-Declared-Latency"


@dataclass(frozen=True)
class ChatResult:
    content: str
    tool_calls: tuple[ToolCall, ...]
    first_token_s: float | None  # seconds from the request to the first streamed fragment
    total_s: float
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    # The request's time as its server scripted it (the stand-in Ollama's declared delays,
    # its X-Standin-Declared-Latency header); None: a real LLM, whose time is measured.
    declared_s: float | None = None


@dataclass(frozen=True)
class BackendHealth:
    ok: bool
    message: str  # one line for the status bar
    models: tuple[str, ...] = field(default_factory=tuple)


class CancelEvent(threading.Event):
    """A cancel flag that also calls back when it is set.

    A plain `threading.Event` is only seen between two chunks of a reply; a backend blocked in
    a read (a server that hangs before its first byte) would not notice it until its timeout.
    With a callback the backend closes the connection the moment the flag is set, so the
    server sees the request abandoned at once and the waiting thread returns.
    """

    def __init__(self) -> None:
        super().__init__()
        self._callbacks: list[Callable[[], None]] = []
        self._callbacks_lock = threading.Lock()

    def set(self) -> None:
        with self._callbacks_lock:
            first = not self.is_set()
            super().set()
            callbacks, self._callbacks = (self._callbacks, []) if first else ([], [])
        for callback in callbacks:  # on the thread that cancels
            callback()

    def on_set(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call `callback` when the flag is set (at once if it already is); the returned
        function unregisters it."""
        with self._callbacks_lock:
            if not self.is_set():
                self._callbacks.append(callback)
                return lambda: self._forget(callback)
        callback()
        return lambda: None

    def _forget(self, callback: Callable[[], None]) -> None:
        with self._callbacks_lock:
            if callback in self._callbacks:
                self._callbacks.remove(callback)


class LLMError(RuntimeError):
    def __init__(self, kind: ErrorKind, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def check_cancel(cancel: threading.Event | None) -> None:
    if cancel is not None and cancel.is_set():
        raise LLMError("cancelled", "The LLM request was cancelled.")


class LLMBackend(ABC):
    """A chat LLM with tool calling. Implementations are thread-safe for one call at a time
    per instance; the orchestrator runs them off the frame loop."""

    name: str = "backend"

    @abstractmethod
    def chat(
        self,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSpec] = (),
        on_delta: Callable[[str], None] | None = None,
        cancel: threading.Event | None = None,
    ) -> ChatResult:
        """One streamed chat completion. `on_delta` receives content fragments as they
        arrive; setting `cancel` aborts the request, even one blocked waiting for the server
        (its connection is closed), and raises LLMError kind "cancelled"."""

    @abstractmethod
    def list_models(self) -> list[str]:
        """The models the server offers (for the settings dialog)."""

    def health(self) -> BackendHealth:
        try:
            models = self.list_models()
        except LLMError as exc:
            return BackendHealth(False, str(exc))
        return BackendHealth(True, f"{self.name}: {len(models)} model(s) available", tuple(models))
