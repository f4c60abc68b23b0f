"""A tool whose input schema is malformed costs its own server that one tool, not every LLM
turn: it is left out when its server connects, with a notice naming server and tool, and
the built-in tools, the server's other tools and other servers' tools are offered and work.
Real parts: two stdio servers made with the SDK (one lists a tool whose `"required"` is a
string), the hub, the registry, the `ollama` client (it validates every tool's schema)
against the stand-in Ollama."""

from __future__ import annotations

import pytest

from app.llm.backend import ChatMessage
from app.llm.ollama_backend import OllamaBackend, OllamaSettings
from app.llm.ollama_standin import OllamaStandIn, ScriptedReply
from app.tools.base import ToolRegistry
from app.tools.calculator import CalculatorTool
from app.tools.mcp.consent import ConsentBroker
from app.tools.mcp.hub import McpHub
from app.tools.mcp.input_schema import input_schema_problem
from app.tools.mcp.offer import add_mcp_servers
from tests.tools.mcp.mcp_servers import stdio_server

START_S = 60.0


@pytest.fixture()
def hub():
    hub = McpHub(consent=ConsentBroker(timeout_s=5.0))
    yield hub
    hub.close_all()


def _script(body: dict) -> ScriptedReply:
    last = body["messages"][-1]
    if last["role"] == "tool":
        return ScriptedReply(content=f"Found: {last['content']}")
    return ScriptedReply(tool_calls=[{"name": "notes__lookup_word",
                                      "arguments": {"word": "otter"}}])


def test_a_tool_with_a_malformed_schema_is_left_out_and_every_other_tool_works(hub):
    servers = [stdio_server("notes", "--bad-schema"), stdio_server("diary")]
    started = hub.lease(servers)  # running before the conversation leases them: the
    assert all(s.state == "ready" for s in started.wait_settled(START_S))  # notice is sure
    registry = ToolRegistry([CalculatorTool()])
    notices: list[tuple[str, str]] = []
    add_mcp_servers(registry, servers, lambda text, severity: notices.append((text, severity)),
                    hub=hub)
    started.close()
    try:
        assert notices == [(
            "MCP server \"notes\": its tool 'broken_lookup' is left out (its input schema is "
            "not valid JSON Schema: at .required, 'word' is not of type 'array'); the "
            "server's other tools work.", "warning")]
        notes = next(s for s in hub.running() if s.name == "notes")
        assert [t.name for t in notes.left_out] == ["broken_lookup"]
        # Settings → Tools shows the server's message: it names the tool and why.
        assert notes.message == (
            "ready: 10 tool(s); left out: 'broken_lookup' (its input schema is not valid JSON "
            "Schema: at .required, 'word' is not of type 'array')")
        assert "broken_lookup" not in registry.names()
        assert {"calculator", "notes__lookup_word", "diary__lookup_word"} <= set(registry.names())

        with OllamaStandIn(script=_script) as standin:
            backend = OllamaBackend(OllamaSettings(host=standin.url, model="standin:latest",
                                                   timeout_s=30.0, connect_timeout_s=5.0))
            question = [ChatMessage("user", "What does otter mean?")]
            asked = backend.chat(question, registry.specs())  # raised for the bad schema
            call = asked.tool_calls[0]
            result = registry.call(call.name, call.arguments)
            answer = backend.chat([*question, ChatMessage("assistant", "", tool_calls=(call,)),
                                   ChatMessage("tool", result.content, tool_name=call.name)],
                                  registry.specs())
            offered = {t["function"]["name"] for t in standin.requests[0]["tools"]}
            backend.close()
    finally:
        registry.close()
    assert result.ok and result.server == "notes"
    assert answer.content.startswith("Found: otter: a test word")
    assert {"calculator", "notes__lookup_word", "diary__lookup_word"} <= offered
    assert "broken_lookup" not in offered


@pytest.mark.parametrize("schema, problem", [
    ({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}, None),
    ({"type": "object"}, None),
    ({"properties": {"a": {"type": "string"}}}, None),  # no type: read as an object
    ({"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
      "properties": {"a": {"anyOf": [{"type": "number"}, {"type": "null"}], "default": None}}},
     None),
    ({"type": "object", "required": "a"},
     "its input schema is not valid JSON Schema: at .required, 'a' is not of type 'array'"),
    ({"type": "object", "properties": {"a": {"description": 5}}},
     "its input schema is not valid JSON Schema: at .properties.a.description, 5 is not of "
     "type 'string'"),
    ({"type": "array"}, "its input schema does not describe an object (\"type\": \"object\")"),
    ({"type": "object", "properties": {"a": True}},
     "its input schema's property 'a' is not an object schema"),
    (["a"], "its input schema is a list, not a JSON object"),
])
def test_what_makes_an_input_schema_unusable(schema, problem):
    assert input_schema_problem(schema) == problem
