"""Our MCP server of Full-Duplex-Bench v3's 12 mock APIs (mock_apis.py), over stdio:
`python -m app.eval.fdb3.mock_server [--latency normal] [--log calls.jsonl]`.

`eval fdb3 run` starts one per sample through the app's own MCP client, so the benchmark's
tools reach the LLM the way a user's tools do. The names and arguments are the benchmark's;
the descriptions are ours, saying what its agent's descriptions say (call the tool, never
answer from memory, do not ask first). Tools that change something are marked so (MCP's
destructiveHint); the run allows them, as the benchmark's simulated environment does.
Each call may be logged, with its wall-clock start and end, to a JSON-lines file. Each
answer says the latency it scripted (its result's `_meta`, app/tools/mcp/content.py), so a
replay counts that and not how long the machine took.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult, TextContent, ToolAnnotations

from app.eval.fdb3.mock_apis import API, CHANGES, LATENCY_PROFILES, MockState, latency_s
from app.tools.mcp.content import DECLARED_LATENCY_KEY

SERVER_NAME = "fdb3"
DESCRIPTIONS = {
    "search_flights": "Search the flights available to a destination on a date.",
    "book_flight": "Book a flight ticket for a passenger (the flight found last).",
    "update_identity_doc": "Update one of the user's identity documents (passport, "
                           "driver license, ID card) with its new number. This is a test "
                           "environment: the update is allowed.",
    "get_card_benefits": "Get the benefits of a credit card type. Always call it: never "
                         "tell benefits from memory.",
    "get_exchange_rate": "Get the current exchange rate and the converted amount. Always "
                         "call it: never guess a rate.",
    "modify_autopay": "Change which account pays a bill by autopay. Do it as soon as the "
                      "user asks.",
    "search_apartments": "Search the rental apartments in a city by bedrooms and budget.",
    "calculate_commute": "Calculate the commute between two addresses. Always call it: "
                         "never estimate.",
    "update_search_filter": "Update a filter of the user's apartment search at once, "
                            "without asking first.",
    "track_order": "Track an order's delivery status. Call it for every order id the user "
                   "names.",
    "search_products": "Search the product catalog. Always call it for recommendations: "
                       "never answer from memory.",
    "add_to_cart": "Add a product to the shopping cart as soon as the user asks.",
}
ARGUMENT_HELP = {  # the arguments' own descriptions, as the LLM sees them
    "destination": "The city or airport, e.g. 'London' or 'LHR'",
    "date": "The travel date, e.g. '2026-08-20'",
    "passenger_name": "The passenger's name, e.g. 'John Doe'",
    "doc_type": "The document: 'passport', 'driver_license' or 'id_card'",
    "doc_number": "The document's number",
    "card_type": "The card type, e.g. 'platinum' or 'gold'",
    "amount": "The amount to convert",
    "from_currency": "A 3-letter currency code, e.g. 'USD'",
    "to_currency": "A 3-letter currency code, e.g. 'EUR'",
    "bill_type": "The bill, e.g. 'credit_card' or 'utilities'",
    "source_account": "The account that pays, e.g. 'checking'",
    "city": "The city",
    "bedrooms": "Number of bedrooms",
    "max_price": "The highest price (monthly rent, or a product's price)",
    "origin_address": "Where the commute starts",
    "destination_address": "Where the commute ends",
    "mode": "How: 'driving' (the default), 'transit', 'walking' or 'cycling'",
    "filter_name": "The filter to change",
    "value": "The filter's new value",
    "order_id": "The order's identifier, e.g. 'BOB12'",
    "query": "What to search for, e.g. 'headphones'",
    "product_id": "The product's identifier",
    "quantity": "How many",
}


def build_server(profile: str = "instant", log: Path | None = None) -> MCPServer:
    server = MCPServer(SERVER_NAME)
    state = MockState()

    def register(name: str) -> None:
        api = API[name]

        async def call(**arguments: Any) -> CallToolResult:
            started = time.time()
            latency = latency_s(name, profile)
            await asyncio.sleep(latency)
            result = api(state, **arguments)
            if log is not None:
                with log.open("a", encoding="utf-8") as out:
                    out.write(json.dumps({"tool": name, "args": arguments, "start": started,
                                          "end": time.time()}) + "\n")
            # The latency it scripted, said: a replay counts it, not the machine's time.
            return CallToolResult(content=[TextContent(type="text", text=json.dumps(
                result, ensure_ascii=False))], _meta={DECLARED_LATENCY_KEY: latency})

        call.__signature__ = _signature(api)  # type: ignore[attr-defined]
        call.__name__ = name
        call.__doc__ = DESCRIPTIONS[name]
        hints = ToolAnnotations(read_only_hint=name not in CHANGES,
                                destructive_hint=name in CHANGES)
        server.add_tool(call, name=name, description=DESCRIPTIONS[name], annotations=hints,
                        structured_output=False)

    for name in API:
        register(name)
    return server


def input_schemas() -> dict[str, dict[str, Any]]:
    """Each tool's input schema as the server lists it (what the LLM is offered): the
    result files type a call's arguments by it (typed_arguments.py)."""
    tools = asyncio.run(build_server().list_tools())
    return {tool.name: dict(tool.input_schema) for tool in tools}


def _signature(api: Any) -> Any:
    """The API's parameters without the state, each with its description."""
    import inspect
    from typing import Annotated

    from pydantic import Field

    signature = inspect.signature(api, eval_str=True)
    parameters = []
    for parameter in list(signature.parameters.values())[1:]:
        about = Field(description=ARGUMENT_HELP.get(parameter.name, parameter.name))
        parameters.append(parameter.replace(annotation=Annotated[parameter.annotation, about]))
    return signature.replace(parameters=parameters, return_annotation=CallToolResult)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m app.eval.fdb3.mock_server")
    parser.add_argument("--latency", choices=LATENCY_PROFILES, default="instant")
    parser.add_argument("--log", type=Path, default=None, help="JSON lines, one per call")
    args = parser.parse_args(argv)
    build_server(args.latency, args.log).run("stdio")
    return 0


if __name__ == "__main__":
    sys.exit(main())
