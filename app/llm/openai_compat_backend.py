"""A backend for OpenAI-compatible servers (llama.cpp server, LM Studio, vLLM), via `openai`.

These servers stream tool calls in pieces: a call's name first, then its JSON arguments in
string fragments, all keyed by an index. They are put together here and parsed once the stream
ends. Replies are read defensively, since local servers differ in what they fill in.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import openai

from app.llm.backend import (
    BackendChoice,
    ChatMessage,
    ChatResult,
    LLMBackend,
    LLMError,
    ToolCall,
    ToolSpec,
    check_cancel,
)
from app.llm.http_abort import cancellable, client_options
from app.llm_backends import OPENAI_BACKEND

if TYPE_CHECKING:  # the request's shapes, for the checker (their module names vary by version)
    from openai.types.chat import (
        ChatCompletionMessageParam,
        ChatCompletionMessageToolCallParam,
    )

DEFAULT_BASE_URL = OPENAI_BACKEND.default_host


@dataclass(frozen=True)
class OpenAICompatSettings:
    base_url: str = DEFAULT_BASE_URL
    model: str = ""  # empty: the first model the server lists (llama.cpp and LM Studio serve one)
    api_key: str = "not-needed"  # local servers ignore it, but the client insists on one
    timeout_s: float = 30.0  # longest silence while waiting for the reply
    connect_timeout_s: float = 3.0
    temperature: float | None = None
    include_usage: bool = True  # ask for token counts in the last chunk (stream_options)
    extra_body: Mapping[str, Any] = field(default_factory=dict)  # server-specific parameters


def from_choice(choice: BackendChoice) -> OpenAICompatBackend:
    """The OpenAI-compatible server's factory (its row in app/llm_backends.py): its base URL
    is needed; the key is OPENAI_API_KEY when none is given (local servers ignore it, but the
    client insists on one)."""
    if not choice.host:
        raise ValueError(f"an OpenAI-compatible server needs {choice.flag} (the server's base "
                         "URL, e.g. http://127.0.0.1:8000/v1)")
    return OpenAICompatBackend(OpenAICompatSettings(
        base_url=choice.host, model=choice.model or "", timeout_s=choice.timeout_s,
        connect_timeout_s=choice.connect_timeout_s, temperature=choice.temperature,
        api_key=choice.api_key or os.environ.get("OPENAI_API_KEY") or "not-needed"))


class _Malformed(Exception):
    """The reply decoded but does not have the shape of a chat completion chunk."""


@dataclass
class _PendingCall:
    """A tool call while its pieces stream in."""

    name: str = ""
    arguments: list[str] = field(default_factory=list)


class OpenAICompatBackend(LLMBackend):
    name = "OpenAI-compatible server"

    def __init__(self, settings: OpenAICompatSettings | None = None) -> None:
        self.settings = settings or OpenAICompatSettings()
        self._model = self.settings.model
        self._client = openai.OpenAI(
            base_url=self.settings.base_url,
            api_key=self.settings.api_key or "not-needed",
            timeout=openai.Timeout(
                self.settings.timeout_s, connect=self.settings.connect_timeout_s
            ),
            max_retries=0,  # the orchestrator decides about retries; hidden ones add latency
            http_client=openai.DefaultHttpxClient(**client_options()),  # cancel hangs up at once
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
        with cancellable(cancel):
            return self._chat(messages, tools, on_delta, cancel)

    def _chat(
        self,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSpec],
        on_delta: Callable[[str], None] | None,
        cancel: threading.Event | None,
    ) -> ChatResult:
        model = self._resolved_model()
        check_cancel(cancel)
        kwargs: dict[str, Any] = {}
        if tools:
            kwargs["tools"] = [tool_to_wire(t) for t in tools]
        if self.settings.temperature is not None:
            kwargs["temperature"] = self.settings.temperature
        if self.settings.include_usage:
            kwargs["stream_options"] = {"include_usage": True}
        if self.settings.extra_body:
            kwargs["extra_body"] = dict(self.settings.extra_body)

        start = time.monotonic()
        parts: list[str] = []
        pending: dict[int, _PendingCall] = {}
        first_token_s: float | None = None
        usage: Any = None
        stream: Any = None
        try:
            stream = self._call(
                lambda: self._client.chat.completions.create(
                    model=model, messages=messages_to_wire(messages), stream=True, **kwargs
                ),
                started=False,
            )
            chunks = self._translated(stream)
            for chunk in chunks:
                check_cancel(cancel)
                content, got_call = _read_chunk(chunk, pending)
                if first_token_s is None and (content or got_call):
                    first_token_s = time.monotonic() - start
                usage = getattr(chunk, "usage", None) or usage
                if content:
                    parts.append(content)
                    if on_delta is not None:
                        on_delta(content)
            check_cancel(cancel)  # an aborted stream can look like one that ended
        finally:
            if stream is not None:
                stream.close()  # also on cancel: releases the connection mid-stream
        prompt_tokens, completion_tokens = _usage_counts(usage)
        return ChatResult(
            content="".join(parts),
            tool_calls=_finish_calls(pending),
            first_token_s=first_token_s,
            total_s=time.monotonic() - start,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
        )

    def list_models(self) -> list[str]:
        page = self._call(lambda: self._client.models.list(), started=False)
        try:
            return [m.id for m in page.data if isinstance(getattr(m, "id", None), str)]
        except (AttributeError, TypeError) as exc:
            raise LLMError("malformed", f"{self._where()} sent a malformed model list.") from exc

    # -- helpers ---------------------------------------------------------------------------

    def _resolved_model(self) -> str:
        if not self._model:
            models = self.list_models()
            if not models:
                raise LLMError("model_missing", f"{self._where()} has no model loaded.")
            self._model = models[0]
        return self._model

    def _where(self) -> str:
        return f"The server at {self.settings.base_url}"

    def _call(self, fn: Callable[[], Any], *, started: bool) -> Any:
        try:
            return fn()
        except Exception as exc:
            mapped = self._translate(exc, started=started)
            if mapped is exc:
                raise
            raise mapped from exc

    def _translated(self, stream: Iterator[Any]) -> Iterator[Any]:
        """The stream with its failures as LLMError; the caller's own exceptions pass through."""
        try:
            yield from stream
        except Exception as exc:
            mapped = self._translate(exc, started=True)
            if mapped is exc:
                raise
            raise mapped from exc

    def _translate(self, exc: Exception, *, started: bool) -> Exception:
        where = self._where()
        if isinstance(exc, openai.APITimeoutError):
            cause = exc.__cause__
            if not started and type(cause).__name__ == "ConnectTimeout":
                return LLMError("unreachable", f"{where} is not reachable (is it running?)")
            return LLMError("timeout", f"{where} sent nothing for {self.settings.timeout_s:g} s.")
        if isinstance(exc, openai.APIConnectionError):
            if started:
                url = self.settings.base_url
                return LLMError("http", f"The connection to {url} broke mid-reply.")
            return LLMError("unreachable", f"{where} is not reachable (is it running?)")
        if isinstance(exc, openai.NotFoundError):
            if "model" in str(exc.message).lower():
                return LLMError(
                    "model_missing", f"{where} does not serve the model '{self._model}'."
                )
            return LLMError("http", f"{where} answered 404 (does the base URL end in /v1?)")
        if isinstance(exc, openai.APIStatusError):
            return LLMError("http", f"{where} answered HTTP {exc.status_code}: {exc.message}")
        if isinstance(exc, openai.APIError):  # an error event inside the stream
            return LLMError("http", f"{where} failed mid-reply: {exc.message}")
        if isinstance(exc, (json.JSONDecodeError, _Malformed)):
            return LLMError("malformed", f"{where} sent a malformed reply: {exc}")
        return exc



def _read_chunk(chunk: Any, pending: dict[int, _PendingCall]) -> tuple[str, bool]:
    """The content fragment of one chunk; tool-call pieces are added to `pending`."""
    choices = getattr(chunk, "choices", None)
    if choices is None:
        return "", False
    if not isinstance(choices, list):
        raise LLMError("malformed", "A streamed chunk's choices are not a list.")
    content = ""
    got_call = False
    for choice in choices[:1]:  # n = 1
        delta = getattr(choice, "delta", None)
        if delta is None:
            continue
        text = getattr(delta, "content", None)
        if text is not None and not isinstance(text, str):
            raise LLMError("malformed", "A streamed chunk's content is not text.")
        content = text or ""
        for piece in getattr(delta, "tool_calls", None) or ():
            got_call = True
            _add_piece(piece, pending)
    return content, got_call


def _add_piece(piece: Any, pending: dict[int, _PendingCall]) -> None:
    index = getattr(piece, "index", None)
    if not isinstance(index, int):
        # Some servers leave out the index: a piece with an id opens a new call.
        has_id = bool(getattr(piece, "id", None))
        index = len(pending) if has_id or not pending else max(pending)
    call = pending.setdefault(index, _PendingCall())
    function = getattr(piece, "function", None)
    name = getattr(function, "name", None)
    arguments = getattr(function, "arguments", None)
    if name is not None and not isinstance(name, str):
        raise LLMError("malformed", "A streamed tool call's name is not text.")
    if arguments is not None and not isinstance(arguments, str):
        raise LLMError("malformed", "A streamed tool call's arguments are not a JSON string.")
    if name:
        call.name = call.name or name  # some servers repeat the name in every piece
    if arguments:
        call.arguments.append(arguments)


def _finish_calls(pending: dict[int, _PendingCall]) -> tuple[ToolCall, ...]:
    calls = []
    for index in sorted(pending):
        call = pending[index]
        text = "".join(call.arguments).strip() or "{}"
        try:
            arguments = json.loads(text)
        except json.JSONDecodeError as exc:
            raise LLMError(
                "malformed", f"Tool call {call.name or index} has unparsable arguments: {exc}"
            ) from exc
        if not call.name or not isinstance(arguments, dict):
            raise LLMError("malformed", f"Tool call {call.name or index} is not a named object.")
        calls.append(ToolCall(name=call.name, arguments=arguments))
    return tuple(calls)


def _usage_counts(usage: Any) -> tuple[int | None, int | None]:
    prompt = getattr(usage, "prompt_tokens", None)
    completion = getattr(usage, "completion_tokens", None)
    return (
        prompt if isinstance(prompt, int) else None,
        completion if isinstance(completion, int) else None,
    )


def messages_to_wire(messages: Sequence[ChatMessage]) -> list[ChatCompletionMessageParam]:
    """ChatMessages in OpenAI's shape. Our messages carry no call ids, so ids are made up
    here and each tool result is paired with the earliest open call of the same tool."""
    wire: list[ChatCompletionMessageParam] = []
    open_calls: list[tuple[str, str]] = []  # (id, tool name) not yet answered
    for position, message in enumerate(messages):
        if message.role == "assistant" and message.tool_calls:
            calls: list[ChatCompletionMessageToolCallParam] = []
            for number, call in enumerate(message.tool_calls):
                call_id = f"call_{position}_{number}"
                open_calls.append((call_id, call.name))
                calls.append(
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
                    }
                )
            wire.append(
                {"role": "assistant", "content": message.content or None, "tool_calls": calls}
            )
        elif message.role == "tool":
            match = next((c for c in open_calls if c[1] == message.tool_name), None)
            match = match or (open_calls[0] if open_calls else None)
            if match is not None:
                open_calls.remove(match)
                call_id = match[0]
            else:
                call_id = f"call_{position}_orphan"
            wire.append({"role": "tool", "content": message.content, "tool_call_id": call_id})
        elif message.role == "assistant":
            wire.append({"role": "assistant", "content": message.content})
        elif message.role == "system":
            wire.append({"role": "system", "content": message.content})
        else:
            wire.append({"role": "user", "content": message.content})
    return wire


def tool_to_wire(tool: ToolSpec) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description,
            "parameters": dict(tool.parameters),
        },
    }
