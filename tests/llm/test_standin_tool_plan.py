"""The stand-in Ollama plays a plan of tool calls over the real wire protocol, as a model
that uses tools does: one round per request, references to earlier results resolved from
what the client handed back, the plan played once whatever the turns."""

from __future__ import annotations

import json

from app.llm.backend import ChatMessage
from app.llm.ollama_backend import OllamaBackend, OllamaSettings
from app.llm.ollama_standin import OllamaStandIn, PlannedCall, ToolPlanScript
from app.llm.result_references import MISSING, resolve


def test_references_resolve_into_results():
    results = [{"products": [{"product_id": "P7"}]}, "plain text"]
    assert resolve("$RESULT_0.products[0].product_id", results) == "P7"
    assert resolve("$RESULT_0.products[3].product_id", results) is MISSING
    assert resolve("$RESULT_2.x", results) is MISSING
    assert resolve("$RESULT_1", results) == "plain text"
    assert resolve("RESULT_0", results) is MISSING


def test_a_plan_is_played_round_by_round_with_results_resolved():
    plan = ToolPlanScript([
        [PlannedCall("search_products", {"query": "shoes"}),
         PlannedCall("track_order", {"order_id": "K77"})],
        [PlannedCall("add_to_cart", {"product_id": "$RESULT_0.products[0].product_id",
                                     "quantity": 2})]], answer="Done.", after="Anything else?")
    with OllamaStandIn(script=plan) as standin:
        backend = OllamaBackend(OllamaSettings(host=standin.url, model="standin:latest",
                                               timeout_s=10.0, connect_timeout_s=1.0))
        messages = [ChatMessage("user", "buy shoes and track K77")]
        first = backend.chat(messages)
        assert [(c.name, dict(c.arguments)) for c in first.tool_calls] == [
            ("search_products", {"query": "shoes"}), ("track_order", {"order_id": "K77"})]
        messages += [ChatMessage("assistant", "", tool_calls=first.tool_calls),
                     ChatMessage("tool", json.dumps({"products": [{"product_id": "P9"}]}),
                                 tool_name="search_products"),
                     ChatMessage("tool", '{"status": "shipped"}', tool_name="track_order")]
        second = backend.chat(messages)
        assert [(c.name, dict(c.arguments)) for c in second.tool_calls] == [
            ("add_to_cart", {"product_id": "P9", "quantity": 2})]
        messages += [ChatMessage("assistant", "", tool_calls=second.tool_calls),
                     ChatMessage("tool", '{"status": "added"}', tool_name="add_to_cart")]
        assert backend.chat(messages).content == "Done."
        # A new turn: the plan is not played again.
        again = backend.chat([ChatMessage("user", "and now?")])
        assert again.content == "Anything else?" and not again.tool_calls
    assert plan.results[0] == {"products": [{"product_id": "P9"}]}
