"""OllamaBackend through the real `ollama` client, against the local Ollama stand-in."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from app.llm.backend import ChatMessage, LLMError, ToolCall, ToolSpec
from app.llm.ollama_backend import OllamaBackend, OllamaSettings
from app.llm.ollama_standin import OllamaStandIn, ScriptedReply
from tests.ports import free_port

MODEL = "standin:latest"
HELLO = [ChatMessage("system", "You are terse."), ChatMessage("user", "Say hello.")]
SEARCH = ToolSpec(
    name="web_search",
    description="Search the web and return the top results.",
    parameters={
        "type": "object",
        "properties": {"query": {"type": "string", "description": "What to look for."}},
        "required": ["query"],
    },
)


@pytest.fixture()
def standin() -> Iterator[OllamaStandIn]:
    server = OllamaStandIn()
    with server:
        yield server


def make_backend(host: str, **overrides: Any) -> OllamaBackend:
    settings = OllamaSettings(host=host, model=MODEL, timeout_s=5.0, connect_timeout_s=1.0)
    return OllamaBackend(replace(settings, **overrides))


@pytest.fixture()
def backend(standin: OllamaStandIn) -> Iterator[OllamaBackend]:
    client = make_backend(standin.url)
    yield client
    client.close()


def closed_port_url() -> str:
    """An address where nothing listens."""
    return f"http://127.0.0.1:{free_port()}"


def test_streamed_text_arrives_in_order(standin: OllamaStandIn, backend: OllamaBackend) -> None:
    text = "The quick brown fox jumps over the lazy dog."
    standin.script = [ScriptedReply(content=text, chunk_chars=5)]
    fragments: list[str] = []

    result = backend.chat(HELLO, on_delta=fragments.append)

    assert fragments == [text[i : i + 5] for i in range(0, len(text), 5)]
    assert result.content == text
    assert result.tool_calls == ()
    assert result.first_token_s is not None and result.first_token_s >= 0
    assert result.total_s >= result.first_token_s
    assert result.prompt_tokens == 5  # the stand-in counts the prompt's words
    assert result.completion_tokens == len(fragments)
    body = standin.requests[0]
    assert body["model"] == MODEL and body["stream"] is True and body["tools"] == []
    assert body["messages"] == [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Say hello."},
    ]


def test_settings_reach_the_request(standin: OllamaStandIn) -> None:
    client = make_backend(
        standin.url, options={"temperature": 0.2, "num_ctx": 4096}, keep_alive="10m"
    )
    try:
        client.chat(HELLO)
    finally:
        client.close()
    body = standin.requests[0]
    assert body["options"] == {"temperature": 0.2, "num_ctx": 4096}
    assert body["keep_alive"] == "10m"


def test_tool_call_and_tools_in_ollama_format(
    standin: OllamaStandIn, backend: OllamaBackend
) -> None:
    call = {"name": "web_search", "arguments": {"query": "weather in Lyon"}}
    standin.script = [ScriptedReply(tool_calls=[call])]

    result = backend.chat(HELLO, tools=[SEARCH])

    assert result.tool_calls == (ToolCall("web_search", {"query": "weather in Lyon"}),)
    assert result.content == ""
    assert result.first_token_s is not None  # a tool call counts as the first output
    assert standin.requests[0]["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "web_search",
                "description": "Search the web and return the top results.",
                "parameters": {
                    "type": "object",
                    "properties": {"query": {"type": "string", "description": "What to look for."}},
                    "required": ["query"],
                },
            },
        }
    ]


def test_tool_round_trip_is_serialized_for_ollama(
    standin: OllamaStandIn, backend: OllamaBackend
) -> None:
    standin.script = [ScriptedReply(content="It is sunny in Lyon.")]
    conversation = [
        *HELLO,
        ChatMessage(
            "assistant", "", tool_calls=(ToolCall("web_search", {"query": "weather in Lyon"}),)
        ),
        ChatMessage("tool", "Lyon: sunny, 21 C", tool_name="web_search"),
    ]

    result = backend.chat(conversation, tools=[SEARCH])

    assert result.content == "It is sunny in Lyon."
    sent = standin.requests[0]["messages"]
    assert sent[2] == {
        "role": "assistant",
        "tool_calls": [
            {"function": {"name": "web_search", "arguments": {"query": "weather in Lyon"}}}
        ],
    }
    assert sent[3] == {"role": "tool", "tool_name": "web_search", "content": "Lyon: sunny, 21 C"}


def test_script_is_consumed_in_order_and_last_reply_repeats(
    standin: OllamaStandIn, backend: OllamaBackend
) -> None:
    standin.script = [ScriptedReply(content="one"), ScriptedReply(content="two")]
    answers = [backend.chat(HELLO).content for _ in range(3)]
    assert answers == ["one", "two", "two"]
    assert len(standin.requests) == 3


def test_server_down_is_unreachable() -> None:
    host = closed_port_url()
    client = make_backend(host)
    try:
        with pytest.raises(LLMError) as info:
            client.chat(HELLO)
        assert info.value.kind == "unreachable"
        assert host in str(info.value) and "running" in str(info.value)
        health = client.health()
    finally:
        client.close()
    assert not health.ok and host in health.message


def test_slow_reply_times_out(standin: OllamaStandIn) -> None:
    standin.script = [ScriptedReply(content="late", first_token_delay_s=2.0)]
    client = make_backend(standin.url, timeout_s=0.3)
    try:
        with pytest.raises(LLMError) as info:
            client.chat(HELLO)
    finally:
        client.close()
    assert info.value.kind == "timeout"


def test_stall_mid_stream_times_out(standin: OllamaStandIn) -> None:
    standin.script = [ScriptedReply(content="a" * 32, chunk_chars=8, chunk_delay_s=2.0)]
    client = make_backend(standin.url, timeout_s=0.3)
    fragments: list[str] = []
    try:
        with pytest.raises(LLMError) as info:
            client.chat(HELLO, on_delta=fragments.append)
    finally:
        client.close()
    assert info.value.kind == "timeout"
    assert fragments == ["a" * 8]


def test_http_500_is_http(standin: OllamaStandIn, backend: OllamaBackend) -> None:
    standin.script = [ScriptedReply(status=500, error="out of memory")]
    with pytest.raises(LLMError) as info:
        backend.chat(HELLO)
    assert info.value.kind == "http"
    assert "500" in str(info.value) and "out of memory" in str(info.value)


def test_unknown_model_is_model_missing(standin: OllamaStandIn) -> None:
    client = make_backend(standin.url, model="llama9:70b")
    try:
        with pytest.raises(LLMError) as info:
            client.chat(HELLO)
        health = client.health()
    finally:
        client.close()
    assert info.value.kind == "model_missing"
    assert "llama9:70b" in str(info.value) and "ollama pull llama9:70b" in str(info.value)
    assert not health.ok and "ollama pull" in health.message
    assert health.models == (MODEL,)


def test_malformed_line_is_malformed(standin: OllamaStandIn, backend: OllamaBackend) -> None:
    standin.script = [ScriptedReply(content="hello world, again", malformed=True)]
    with pytest.raises(LLMError) as info:
        backend.chat(HELLO)
    assert info.value.kind == "malformed"


def test_tool_arguments_not_an_object_is_malformed(
    standin: OllamaStandIn, backend: OllamaBackend
) -> None:
    bad = {"name": "web_search", "arguments": '{"query": "as a string"}'}
    standin.script = [ScriptedReply(tool_calls=[bad])]
    with pytest.raises(LLMError) as info:
        backend.chat(HELLO, tools=[SEARCH])
    assert info.value.kind == "malformed"


def test_error_line_inside_the_stream(standin: OllamaStandIn, backend: OllamaBackend) -> None:
    standin.script = [ScriptedReply(content="partial answer", stream_error="runner crashed")]
    fragments: list[str] = []
    with pytest.raises(LLMError) as info:
        backend.chat(HELLO, on_delta=fragments.append)
    assert info.value.kind == "http"
    assert "runner crashed" in str(info.value)
    assert fragments == ["partial "]


def test_cancel_mid_stream(standin: OllamaStandIn, backend: OllamaBackend) -> None:
    # Slow enough that the whole reply would take seconds; cancel must not wait for it.
    standin.script = [ScriptedReply(content="x" * 400, chunk_chars=4, chunk_delay_s=0.05)]
    cancel = threading.Event()
    fragments: list[str] = []

    def on_delta(fragment: str) -> None:
        fragments.append(fragment)
        cancel.set()

    with pytest.raises(LLMError) as info:
        backend.chat(HELLO, on_delta=on_delta, cancel=cancel)
    assert info.value.kind == "cancelled"
    assert fragments == ["xxxx"]


def test_cancel_before_start_sends_nothing(standin: OllamaStandIn, backend: OllamaBackend) -> None:
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(LLMError) as info:
        backend.chat(HELLO, cancel=cancel)
    assert info.value.kind == "cancelled"
    assert standin.requests == []


def test_callback_errors_are_not_disguised(standin: OllamaStandIn, backend: OllamaBackend) -> None:
    def on_delta(fragment: str) -> None:
        raise ValueError("a bug in the caller")

    with pytest.raises(ValueError, match="a bug in the caller"):
        backend.chat(HELLO, on_delta=on_delta)


def test_callable_script_sees_the_request(standin: OllamaStandIn, backend: OllamaBackend) -> None:
    standin.script = lambda body: ScriptedReply(content=body["messages"][-1]["content"].upper())
    assert backend.chat(HELLO).content == "SAY HELLO."


def test_list_models_and_health() -> None:
    with OllamaStandIn(models=("qwen3:4b", "llama3.2:latest")) as server:
        client = make_backend(server.url, model="llama3.2")
        try:
            models = client.list_models()
            health = client.health()
        finally:
            client.close()
    assert models == ["qwen3:4b", "llama3.2:latest"]
    assert health.ok and health.models == ("qwen3:4b", "llama3.2:latest")
    assert "llama3.2" in health.message


def test_standin_show_and_non_streaming_chat(standin: OllamaStandIn) -> None:
    import ollama

    standin.script = [
        ScriptedReply(content="plain", tool_calls=[{"name": "clock", "arguments": {}}])
    ]
    client = ollama.Client(host=standin.url, timeout=5.0)
    try:
        shown = client.show(MODEL)
        reply = client.chat(model=MODEL, messages=[{"role": "user", "content": "hi"}])
        with pytest.raises(ollama.ResponseError) as info:
            client.show("nope")
    finally:
        client.close()
    assert "tools" in (shown.capabilities or [])
    assert reply.done and reply.message.content == "plain"
    assert reply.message.tool_calls[0].function.name == "clock"
    assert info.value.status_code == 404


def test_settings_host_defaults_to_ollama_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OLLAMA_HOST", "http://127.0.0.1:1")
    assert OllamaSettings().host == "http://127.0.0.1:1"
    monkeypatch.delenv("OLLAMA_HOST")
    assert OllamaSettings().host == "http://127.0.0.1:11434"
