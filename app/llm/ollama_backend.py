"""The Ollama backend: streamed chat with tools through the official `ollama` client.

Every failure leaves as an `LLMError` whose kind the UI can act on (start Ollama, pull the
model, ...). The client has no timeout by default, so one is always set here.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import httpx
import ollama
import pydantic

from app.llm.backend import (
    DECLARED_LATENCY_HEADER,
    BackendChoice,
    BackendHealth,
    ChatMessage,
    ChatResult,
    LLMBackend,
    LLMError,
    ToolCall,
    ToolSpec,
    check_cancel,
)
from app.llm.http_abort import cancellable, client_options
from app.llm.ndjson_safe_transport import LineSeparatorSafeTransport
from app.llm_backends import OLLAMA_BACKEND

DEFAULT_HOST = OLLAMA_BACKEND.default_host
DEFAULT_MODEL = "qwen3:4b"  # small, local, and trained for tool calls


_declared = threading.local()  # the header of this thread's last reply (httpx hooks run here)


def _note_declared_latency(response: httpx.Response) -> None:
    try:
        _declared.seconds = float(response.headers[DECLARED_LATENCY_HEADER])
    except (KeyError, ValueError):
        _declared.seconds = None


def _host_from_env() -> str:
    return os.environ.get("OLLAMA_HOST") or DEFAULT_HOST


@dataclass(frozen=True)
class OllamaSettings:
    host: str = field(default_factory=_host_from_env)
    model: str = DEFAULT_MODEL
    timeout_s: float = 30.0  # longest silence while waiting for the reply (model load included)
    connect_timeout_s: float = 3.0
    keep_alive: str | float | None = None  # how long Ollama keeps the model loaded, e.g. "10m"
    options: Mapping[str, Any] = field(default_factory=dict)  # temperature, num_ctx, ...
    think: bool | None = None  # thinking models: None leaves Ollama's default


def from_choice(choice: BackendChoice) -> OllamaBackend:
    """Ollama's factory (its row in app/llm_backends.py): an empty host or model is Ollama's
    default (OLLAMA_HOST included)."""
    defaults = OllamaSettings()
    return OllamaBackend(OllamaSettings(
        host=choice.host or defaults.host, model=choice.model or defaults.model,
        timeout_s=choice.timeout_s, connect_timeout_s=choice.connect_timeout_s,
        options={} if choice.temperature is None else {"temperature": choice.temperature}))


class _Malformed(Exception):
    """The reply parsed as JSON but does not have the shape of an Ollama chat reply."""


class OllamaBackend(LLMBackend):
    name = "Ollama"

    def __init__(self, settings: OllamaSettings | None = None) -> None:
        self.settings = settings or OllamaSettings()
        options = client_options()  # a cancel closes the request's connection at once
        options["event_hooks"]["response"] = [_note_declared_latency]
        # Lines split at "\n" only, as Ollama writes them (ndjson_safe_transport.py); the
        # transport is given its own copy of the connection limits, which httpx would
        # otherwise apply to its default transport.
        transport = LineSeparatorSafeTransport(httpx.HTTPTransport(limits=options.pop("limits")))
        self._client = ollama.Client(
            host=self.settings.host,
            timeout=httpx.Timeout(self.settings.timeout_s, connect=self.settings.connect_timeout_s),
            transport=transport,
            **options,
        )

    def close(self) -> None:
        """Release the pooled connections."""
        self._client.close()

    # -- LLMBackend ------------------------------------------------------------------------

    def chat(
        self,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSpec] = (),
        on_delta: Callable[[str], None] | None = None,
        cancel: threading.Event | None = None,
    ) -> ChatResult:
        model = self.settings.model
        if not model:
            raise LLMError("model_missing", "No Ollama model is chosen (see Settings).")
        with cancellable(cancel):
            return self._chat(model, messages, tools, on_delta, cancel)

    def _chat(
        self,
        model: str,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSpec],
        on_delta: Callable[[str], None] | None,
        cancel: threading.Event | None,
    ) -> ChatResult:
        start = time.monotonic()
        _declared.seconds = None
        # Builds and validates the request now; the HTTP exchange starts on the first next().
        # ollama annotates the stream as an Iterator; it is a generator (closed below).
        stream = cast(Generator[ollama.ChatResponse, None, None], self._client.chat(
            model=model,
            messages=[message_to_wire(m) for m in messages],
            tools=[tool_to_wire(t) for t in tools],
            stream=True,
            options=dict(self.settings.options) or None,
            keep_alive=self.settings.keep_alive,
            think=self.settings.think,
        ))
        parts: list[str] = []
        calls: list[ToolCall] = []
        first_token_s: float | None = None
        final: ollama.ChatResponse | None = None
        translated = self._translated(stream)
        try:
            for chunk in translated:
                check_cancel(cancel)
                content, chunk_calls = _read_chunk(chunk)
                if first_token_s is None and (content or chunk_calls):
                    first_token_s = time.monotonic() - start
                calls.extend(chunk_calls)
                if content:
                    parts.append(content)
                    if on_delta is not None:
                        on_delta(content)
                if chunk.done:
                    final = chunk
                    break
        finally:
            translated.close()  # also on cancel: closing the generators closes the response
            stream.close()
        if final is None:
            raise LLMError("malformed", f"Ollama's reply from {model} ended before it was done.")
        return ChatResult(
            content="".join(parts),
            tool_calls=tuple(calls),
            first_token_s=first_token_s,
            total_s=time.monotonic() - start,
            prompt_tokens=final.prompt_eval_count,
            completion_tokens=final.eval_count,
            declared_s=getattr(_declared, "seconds", None),
        )

    def list_models(self) -> list[str]:
        try:
            reply = self._client.list()
        except Exception as exc:
            mapped = self._translate(exc, waiting="its list of models")
            if mapped is exc:
                raise
            raise mapped from exc
        return [m.model for m in reply.models if m.model]

    def health(self) -> BackendHealth:
        """Also says whether the chosen model is installed: the commonest first-run problem."""
        try:
            models = self.list_models()
        except LLMError as exc:
            return BackendHealth(False, str(exc))
        if not any(_same_model(name, self.settings.model) for name in models):
            return BackendHealth(False, _missing_message(self.settings.model), tuple(models))
        return BackendHealth(True, f"Ollama: {self.settings.model} ready", tuple(models))

    # -- errors ----------------------------------------------------------------------------

    def _translated(self, stream: Iterator[ollama.ChatResponse]
                    ) -> Generator[ollama.ChatResponse, None, None]:
        """The stream, with the client's and the transport's errors turned into LLMError.
        Exceptions raised by the caller's own code (on_delta) pass through untouched."""
        try:
            yield from stream
        except Exception as exc:
            mapped = self._translate(exc)
            if mapped is exc:
                raise
            raise mapped from exc

    def _translate(self, exc: Exception, waiting: str | None = None) -> Exception:
        """The LLMError for a failure, or the exception itself when it is not a server problem.
        `waiting`: what a timeout was waiting for (default: the chosen model's reply)."""
        host, model = self.settings.host, self.settings.model
        if isinstance(exc, (ConnectionError, httpx.ConnectError, httpx.ConnectTimeout)):
            # A connect timeout means nothing answered at that address: same cure as refused.
            return LLMError("unreachable", f"Ollama is not reachable at {host} (is it running?)")
        if isinstance(exc, httpx.UnsupportedProtocol):
            return LLMError("unreachable", f"Ollama host {host!r} is not an http(s) address.")
        if isinstance(exc, httpx.TimeoutException):
            waiting = waiting or f"the reply of {model or 'the model'}"
            return LLMError(
                "timeout",
                f"Ollama at {host} sent nothing for {self.settings.timeout_s:g} s while we "
                f"waited for {waiting}.",
            )
        if isinstance(exc, ollama.ResponseError):
            text = str(exc.error)
            if "model" in text and "not found" in text:
                return LLMError("model_missing", _missing_message(model))
            if exc.status_code == 404:
                return LLMError("http", f"{host} answered 404 (is it an Ollama server?): {text}")
            if exc.status_code == -1:  # an {"error": ...} line inside the stream
                return LLMError("http", f"Ollama failed mid-reply ({model}): {text}")
            return LLMError("http", f"Ollama at {host} answered HTTP {exc.status_code}: {text}")
        if isinstance(exc, httpx.TransportError):
            return LLMError("http", f"The connection to Ollama at {host} broke: {exc}")
        if isinstance(exc, (json.JSONDecodeError, pydantic.ValidationError, _Malformed)):
            return LLMError("malformed", f"Ollama at {host} sent a malformed reply: {_short(exc)}")
        return exc



def _read_chunk(chunk: ollama.ChatResponse) -> tuple[str, list[ToolCall]]:
    """Content fragment and tool calls of one stream line, checked beyond what the client does."""
    message = chunk.message
    content = message.content or ""
    calls: list[ToolCall] = []
    for call in message.tool_calls or ():
        name, arguments = call.function.name, call.function.arguments
        if not name or not isinstance(arguments, Mapping):
            raise LLMError("malformed", f"Ollama sent an unusable tool call: {call!r:.200}")
        calls.append(ToolCall(name=name, arguments=dict(arguments)))
    return content, calls


def message_to_wire(message: ChatMessage) -> dict[str, Any]:
    """A ChatMessage in Ollama's shape (tool results name their tool; there are no call ids)."""
    wire: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.role == "tool" and message.tool_name:
        wire["tool_name"] = message.tool_name
    if message.tool_calls:
        wire["tool_calls"] = [
            {"function": {"name": c.name, "arguments": dict(c.arguments)}}
            for c in message.tool_calls
        ]
    return wire


def tool_to_wire(tool: ToolSpec) -> dict[str, Any]:
    """Note: the client keeps only type/description/enum/items of each parameter property."""
    return {
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description,
            "parameters": dict(tool.parameters),
        },
    }


def _same_model(a: str, b: str) -> bool:
    """Ollama treats "llama3.2" and "llama3.2:latest" as one model."""

    def full(name: str) -> str:
        return name if ":" in name else f"{name}:latest"

    return full(a) == full(b)


def _missing_message(model: str) -> str:
    return f"Model '{model}' is not installed in Ollama; run `ollama pull {model}`."


def _short(exc: Exception, limit: int = 160) -> str:
    text = str(exc).replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 3] + "..."
