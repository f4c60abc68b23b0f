"""Our MCP server of the benchmark's 12 mock APIs, reached through the app's own MCP client:
exactly the benchmark's tool names and arguments, answers that later calls can refer to,
the state a conversation builds, tools that change things marked so."""

from __future__ import annotations

import json

import pytest

from app.eval.fdb3.mock_apis import TOOL_NAMES, latency_s
from app.eval.fdb3.run import mock_server_settings
from app.tools.mcp.connection import McpServerConnection

BENCHMARK_ARGUMENTS = {  # the benchmark agent's schemas: names and required arguments
    "search_flights": ({"destination", "date"}, set()),
    "book_flight": ({"passenger_name"}, set()),
    "update_identity_doc": ({"doc_type", "doc_number"}, set()),
    "get_card_benefits": ({"card_type"}, set()),
    "get_exchange_rate": ({"amount", "from_currency", "to_currency"}, set()),
    "modify_autopay": ({"bill_type", "source_account"}, set()),
    "search_apartments": ({"city", "bedrooms", "max_price"}, set()),
    "calculate_commute": ({"origin_address", "destination_address"}, {"mode"}),
    "update_search_filter": ({"filter_name", "value"}, set()),
    "track_order": ({"order_id"}, set()),
    "search_products": ({"query"}, {"max_price"}),
    "add_to_cart": ({"product_id"}, {"quantity"}),
}


@pytest.fixture(scope="module")
def server():
    connection = McpServerConnection(mock_server_settings("instant"))
    connection.start()
    assert connection.wait_until_settled(60.0).state == "ready", connection.status().message
    yield connection
    connection.close()


def answer(server, tool: str, **arguments) -> dict:
    outcome = server.call(tool, arguments)
    assert outcome.error is None, outcome.error
    return json.loads(outcome.text)


def test_the_twelve_tools_are_the_benchmarks(server):
    tools = {t.name: t for t in server.status().tools}
    assert set(tools) == set(TOOL_NAMES) == set(BENCHMARK_ARGUMENTS)
    for name, (required, optional) in BENCHMARK_ARGUMENTS.items():
        schema = tools[name].parameters
        assert set(schema.get("required", [])) == required, name
        assert set(schema["properties"]) == required | optional, name
        assert tools[name].description
    changing = {n for n, t in tools.items() if not t.read_only}
    assert changing == {"book_flight", "update_identity_doc", "modify_autopay",
                        "update_search_filter", "add_to_cart"}
    assert all(tools[n].destructive for n in changing)


def test_answers_carry_what_later_calls_refer_to_and_repeat(server):
    flights = answer(server, "search_flights", destination="London", date="2026-08-20")
    assert len(flights["flights"]) == 3 and flights["flights"][0]["flight_id"].startswith("FL")
    again = answer(server, "search_flights", destination="London", date="2026-08-20")
    assert again == flights  # the same arguments, the same answer
    booked = answer(server, "book_flight", passenger_name="Ada Lovelace")
    assert booked["flight_id"] == flights["flights"][0]["flight_id"]  # the flight found last
    assert booked["booking_ref"].startswith("BK")
    products = answer(server, "search_products", query="headphones", max_price=100)
    assert all(p["price"] <= 100 for p in products["products"])
    first = products["products"][0]["product_id"]
    answer(server, "add_to_cart", product_id=first, quantity=2)
    cart = answer(server, "add_to_cart", product_id="P0001")
    assert cart["item_count"] == 3 and cart["cart"][0] == {"product_id": first, "quantity": 2}
    rate = answer(server, "get_exchange_rate", amount=500, from_currency="USD",
                  to_currency="EUR")
    assert rate["converted_amount"] == 460.0
    assert "error" in answer(server, "get_card_benefits", card_type="titanium")


def test_a_filter_changes_later_searches(server):
    before = answer(server, "search_apartments", city="Austin", bedrooms=2, max_price=2000)
    answer(server, "update_search_filter", filter_name="pets_allowed", value="true")
    after = answer(server, "search_apartments", city="Austin", bedrooms=2, max_price=2000)
    assert after["apartments"] == [a for a in before["apartments"] if a["pets_allowed"]]
    commute = answer(server, "calculate_commute",
                     origin_address=after["apartments"][0]["address"],
                     destination_address="Union Station", mode="transit")
    assert commute["duration_minutes"] > 0 and commute["mode"] == "transit"


def test_latency_profiles():
    assert latency_s("search_flights", "instant") == 0.0
    assert latency_s("search_flights", "normal") == 0.8
    assert latency_s("search_flights", "slow") == pytest.approx(2.4)
    with pytest.raises(ValueError, match="unknown latency profile"):
        latency_s("track_order", "glacial")


def test_each_answer_says_the_latency_it_scripted(server):
    """What a replay counts for the call instead of the machine's time (docs/replay.md),
    through the app's MCP client and the tool the LLM calls."""
    from app.settings.schema import McpServerSettings
    from app.tools.mcp.consent import ConsentBroker
    from app.tools.mcp.tool import McpTool

    assert server.call("track_order", {"order_id": "B1"}).declared_s == 0.0
    normal = McpServerConnection(mock_server_settings("normal"))
    normal.start()
    try:
        assert normal.wait_until_settled(60.0).state == "ready", normal.status().message
        info = next(t for t in normal.status().tools if t.name == "search_flights")
        tool = McpTool("search_flights", info, normal, McpServerSettings(
            name="fdb3", command="x", consent="always"), ConsentBroker())
        result = tool.run({"destination": "Rome", "date": "October 5"})
    finally:
        normal.close()
    assert result.ok and result.declared_s == 0.8 == latency_s("search_flights", "normal")
    assert result.replayed_s == 0.8  # not the elapsed time, whatever the machine took
