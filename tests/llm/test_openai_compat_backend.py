"""OpenAICompatBackend through the real `openai` client, against a small local stand-in that
streams server-sent events the way llama.cpp server and vLLM do."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from app.llm.backend import ChatMessage, LLMError, ToolCall, ToolSpec
from app.llm.openai_compat_backend import OpenAICompatBackend, OpenAICompatSettings
from tests.ports import free_port

MODEL = "standin-model"
HELLO = [ChatMessage("system", "You are terse."), ChatMessage("user", "Say hello.")]
SEARCH = ToolSpec(
    name="web_search",
    description="Search the web.",
    parameters={"type": "object", "properties": {"query": {"type": "string"}}},
)


# -- a stand-in OpenAI-compatible server ---------------------------------------------------


@dataclass
class Turn:
    """One /v1/chat/completions answer: the `data:` payloads to stream, or an error status."""

    payloads: list[str] = field(default_factory=list)
    delay_s: float = 0.0  # before the response headers
    chunk_delay_s: float = 0.0
    status: int = 200
    error: str = "boom"


def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
    return json.dumps(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": MODEL,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
    )


def text(fragment: str) -> str:
    return chunk({"content": fragment})


def call_piece(index: int, *, name: str | None = None, arguments: str = "") -> str:
    piece: dict[str, Any] = {"index": index, "function": {"arguments": arguments}}
    if name is not None:
        piece.update(id=f"call_{index}", type="function")
        piece["function"]["name"] = name
    return chunk({"tool_calls": [piece]})


def usage(prompt: int, completion: int) -> str:
    counts = {"prompt_tokens": prompt, "completion_tokens": completion}
    return json.dumps(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": MODEL,
            "choices": [],
            "usage": {**counts, "total_tokens": prompt + completion},
        }
    )


class OpenAIStandIn:
    def __init__(self, turns: list[Turn] | None = None, models: tuple[str, ...] = (MODEL,)):
        self.turns = turns or [Turn([text("hi")])]
        self.models = models
        self.requests: list[dict] = []
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        self._served = 0
        standin = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                """Quiet."""

            def do_GET(self) -> None:
                if self.path == "/v1/models":
                    data = [{"id": m, "object": "model", "owned_by": "me"} for m in standin.models]
                    self.reply_json(200, {"object": "list", "data": data})
                else:
                    self.reply_json(404, {"error": {"message": "Not found"}})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                turn = standin.take(body)
                if body.get("model") not in standin.models:
                    message = f"The model `{body.get('model')}` does not exist."
                    self.reply_json(404, {"error": {"message": message, "type": "NotFound"}})
                    return
                if turn.status != 200:
                    self.reply_json(turn.status, {"error": {"message": turn.error}})
                    return
                if standin.stopping.wait(turn.delay_s):
                    return
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.end_headers()
                    for number, payload in enumerate([*turn.payloads, "[DONE]"]):
                        if number and standin.stopping.wait(turn.chunk_delay_s):
                            return
                        self.wfile.write(f"data: {payload}\n\n".encode())
                        self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    return

            def reply_json(self, status: int, payload: Any) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    def take(self, body: dict) -> Turn:
        with self._lock:
            self.requests.append(body)
            turn = self.turns[min(self._served, len(self.turns) - 1)]
            self._served += 1
            return turn

    def __enter__(self) -> OpenAIStandIn:
        self.thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stopping.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=2.0)


@pytest.fixture()
def standin() -> Iterator[OpenAIStandIn]:
    with OpenAIStandIn() as server:
        yield server


def make_backend(base_url: str, **overrides: Any) -> OpenAICompatBackend:
    settings = OpenAICompatSettings(
        base_url=base_url, model=MODEL, timeout_s=5.0, connect_timeout_s=1.0
    )
    return OpenAICompatBackend(replace(settings, **overrides))


@pytest.fixture()
def backend(standin: OpenAIStandIn) -> Iterator[OpenAICompatBackend]:
    client = make_backend(standin.url)
    yield client
    client.close()


def closed_port_url() -> str:
    return f"http://127.0.0.1:{free_port()}/v1"


# -- tests ---------------------------------------------------------------------------------


def test_streamed_text(standin: OpenAIStandIn, backend: OpenAICompatBackend) -> None:
    standin.turns = [Turn([chunk({"role": "assistant"}), text("Hel"), text("lo"), usage(7, 2)])]
    fragments: list[str] = []

    result = backend.chat(HELLO, on_delta=fragments.append)

    assert fragments == ["Hel", "lo"]
    assert result.content == "Hello"
    assert result.tool_calls == ()
    assert result.first_token_s is not None and result.first_token_s >= 0
    assert (result.prompt_tokens, result.completion_tokens) == (7, 2)
    body = standin.requests[0]
    assert body["model"] == MODEL and body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["messages"][1] == {"role": "user", "content": "Say hello."}
    assert "tools" not in body


def test_tool_call_arguments_streamed_in_pieces(
    standin: OpenAIStandIn, backend: OpenAICompatBackend
) -> None:
    standin.turns = [
        Turn(
            [
                call_piece(0, name="web_search"),
                call_piece(0, arguments='{"qu'),
                call_piece(1, name="clock", arguments=""),
                call_piece(0, arguments='ery": "Ly'),
                call_piece(0, arguments='on"}'),
                chunk({}, finish="tool_calls"),
            ]
        )
    ]

    result = backend.chat(HELLO, tools=[SEARCH])

    assert result.tool_calls == (
        ToolCall("web_search", {"query": "Lyon"}),
        ToolCall("clock", {}),
    )
    assert standin.requests[0]["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "web_search",
                "description": "Search the web.",
                "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
            },
        }
    ]


def test_tool_round_trip_pairs_results_with_call_ids(
    standin: OpenAIStandIn, backend: OpenAICompatBackend
) -> None:
    conversation = [
        *HELLO,
        ChatMessage(
            "assistant",
            "",
            tool_calls=(ToolCall("web_search", {"query": "Lyon"}), ToolCall("clock", {})),
        ),
        ChatMessage("tool", "12:00", tool_name="clock"),
        ChatMessage("tool", "sunny", tool_name="web_search"),
    ]

    backend.chat(conversation, tools=[SEARCH])

    sent = standin.requests[0]["messages"]
    calls = sent[2]["tool_calls"]
    assert sent[2]["role"] == "assistant" and sent[2]["content"] is None
    assert [c["function"]["name"] for c in calls] == ["web_search", "clock"]
    assert json.loads(calls[0]["function"]["arguments"]) == {"query": "Lyon"}
    ids = {c["function"]["name"]: c["id"] for c in calls}
    assert sent[3] == {"role": "tool", "content": "12:00", "tool_call_id": ids["clock"]}
    assert sent[4] == {"role": "tool", "content": "sunny", "tool_call_id": ids["web_search"]}


def test_malformed_tool_arguments(standin: OpenAIStandIn, backend: OpenAICompatBackend) -> None:
    standin.turns = [Turn([call_piece(0, name="web_search", arguments='{"query": "Ly')])]
    with pytest.raises(LLMError) as info:
        backend.chat(HELLO, tools=[SEARCH])
    assert info.value.kind == "malformed"
    assert "web_search" in str(info.value)


def test_undecodable_event_is_malformed(
    standin: OpenAIStandIn, backend: OpenAICompatBackend
) -> None:
    standin.turns = [Turn([text("ok"), "{not json"])]
    with pytest.raises(LLMError) as info:
        backend.chat(HELLO)
    assert info.value.kind == "malformed"


def test_server_down_is_unreachable() -> None:
    url = closed_port_url()
    client = make_backend(url)
    try:
        with pytest.raises(LLMError) as info:
            client.chat(HELLO)
        health = client.health()
    finally:
        client.close()
    assert info.value.kind == "unreachable"
    assert url in str(info.value)
    assert not health.ok


def test_slow_server_times_out(standin: OpenAIStandIn) -> None:
    standin.turns = [Turn([text("late")], delay_s=2.0)]
    client = make_backend(standin.url, timeout_s=0.3)
    try:
        with pytest.raises(LLMError) as info:
            client.chat(HELLO)
    finally:
        client.close()
    assert info.value.kind == "timeout"


def test_stall_mid_stream_times_out(standin: OpenAIStandIn) -> None:
    standin.turns = [Turn([text("a"), text("b")], chunk_delay_s=2.0)]
    client = make_backend(standin.url, timeout_s=0.3)
    fragments: list[str] = []
    try:
        with pytest.raises(LLMError) as info:
            client.chat(HELLO, on_delta=fragments.append)
    finally:
        client.close()
    assert info.value.kind == "timeout"
    assert fragments == ["a"]


def test_http_errors(standin: OpenAIStandIn, backend: OpenAICompatBackend) -> None:
    standin.turns = [Turn(status=500, error="CUDA out of memory")]
    with pytest.raises(LLMError) as info:
        backend.chat(HELLO)
    assert info.value.kind == "http" and "500" in str(info.value)

    other = make_backend(standin.url, model="not-loaded")
    try:
        with pytest.raises(LLMError) as missing:
            other.chat(HELLO)
    finally:
        other.close()
    assert missing.value.kind == "model_missing" and "not-loaded" in str(missing.value)


def test_cancel_mid_stream(standin: OpenAIStandIn, backend: OpenAICompatBackend) -> None:
    standin.turns = [Turn([text("x")] * 200, chunk_delay_s=0.05)]
    cancel = threading.Event()
    fragments: list[str] = []

    def on_delta(fragment: str) -> None:
        fragments.append(fragment)
        cancel.set()

    with pytest.raises(LLMError) as info:
        backend.chat(HELLO, on_delta=on_delta, cancel=cancel)
    assert info.value.kind == "cancelled"
    assert fragments == ["x"]


def test_empty_model_uses_the_served_one(standin: OpenAIStandIn) -> None:
    client = make_backend(standin.url, model="")
    try:
        assert client.list_models() == [MODEL]
        assert client.chat(HELLO).content == "hi"
        assert client.health().ok
    finally:
        client.close()
    assert standin.requests[0]["model"] == MODEL
