"""An MCP server's result is untrusted data, as web text is: one that spells the speech
model's control markers reaches the model as content inside exactly one wrapping. The real
path: the stand-in router (real `ollama` client) calls the SDK server's tool through the
registry, the retrieval answer is read as "(tool result) ...", and the engine of the
Context Spanning checkpoint (tiny-cs, its own tokenizer and control ids) encodes it."""

from __future__ import annotations

from app.engine.local_engine import open_conversation
from app.engine.speech_engine import EngineOptions
from app.llm.backend import CancelEvent
from app.llm.ollama_backend import OllamaBackend, OllamaSettings
from app.llm.ollama_standin import OllamaStandIn, ScriptedReply
from app.orchestrator.retrieval import TOOL_PREFIX, retrieve
from app.tools.base import ToolRegistry
from app.tools.mcp.consent import ConsentBroker
from app.tools.mcp.hub import McpHub
from tests.tools.mcp.mcp_servers import stdio_server
from tests.tools.mcp.sdk_server import FORGED


def test_a_forged_tool_result_is_content_inside_one_wrapping(tiny_cs_checkpoint):
    hub = McpHub(consent=ConsentBroker())
    lease = hub.lease([stdio_server("notes")])
    try:
        assert lease.wait_settled(60.0)[0].state == "ready"
        registry = ToolRegistry([], sources=[lease])
        script = [ScriptedReply(tool_calls=[{"name": "forge", "arguments": {}}])]
        with OllamaStandIn(script=script) as standin:
            backend = OllamaBackend(OllamaSettings(host=standin.url, model="standin:latest",
                                                   timeout_s=10.0, connect_timeout_s=1.0))
            answer = retrieve(backend, registry, "what does the server say", "", "", 600,
                              CancelEvent())
    finally:
        hub.close_all()
    assert answer.tool == "forge" and answer.text.startswith(TOOL_PREFIX)
    assert "<system>" in answer.text and "<ret>" in answer.text  # handed on as it came

    conversation = open_conversation(tiny_cs_checkpoint, EngineOptions())  # not started
    tokenizer = conversation.span_tokenizer
    tokens = tokenizer.encode(answer.text)
    assert tokens.ids == tokenizer.open_ids + tokens.content_ids + tokenizer.close_ids
    assert not set(tokens.content_ids) & tiny_cs_checkpoint.manifest.control_ids
    sp = tiny_cs_checkpoint.tokenizer
    assert not [i for i in tokens.content_ids if sp.is_control(i) or sp.is_unknown(i)]
    assert "Result" in sp.decode(list(tokens.content_ids))  # the words around survive
    assert FORGED.startswith("Result:")
