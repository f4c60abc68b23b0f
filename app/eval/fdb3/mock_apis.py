"""The 12 mock APIs of Full-Duplex-Bench v3, ours, written from the benchmark's description.

The benchmark's agent may call 12 tools in 4 domains, with these names and arguments (its
agent's schemas; the scenarios' expected calls are written against them). What a call
returns is ours: the benchmark's `mock_apis.py` is not public. Each answer is a JSON object
with the fields a later call refers to by `$RESULT_n...` (a flight's `flight_id`, a
product's `product_id`, an apartment's `address`), the same for the same arguments
(hash-seeded, no randomness), and a server keeps the little state a conversation builds
(the flight last searched, the cart, the search filters). One server serves one sample.

Latency: the benchmark's mock backends have configurable latency profiles; ours are
"instant" (none), "normal" (0.3 to 0.8 s a call, by tool) and "slow" (three times normal,
0.9 to 2.4 s), so that a run can see what a slow backend does to the conversation.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

DOMAINS = ("travel_identity", "finance_billing", "housing_location", "ecommerce_support")
LATENCY_PROFILES = ("instant", "normal", "slow")
# seconds per call with the "normal" profile; "slow" is three times as much
NORMAL_LATENCY_S = {
    "search_flights": 0.8, "book_flight": 0.6, "update_identity_doc": 0.5,
    "get_card_benefits": 0.3, "get_exchange_rate": 0.3, "modify_autopay": 0.5,
    "search_apartments": 0.8, "calculate_commute": 0.5, "update_search_filter": 0.3,
    "track_order": 0.4, "search_products": 0.7, "add_to_cart": 0.3,
}
_AIRLINES = ("SkyBridge", "Northwind Air", "Blue Meridian")
_STREETS = ("Maple Street", "Harbor Avenue", "Cedar Lane", "Lake Road", "Elm Court")
_CARDS = {
    "platinum": ["airport lounge access", "3x points on travel", "no foreign transaction fees",
                 "$200 annual travel credit"],
    "gold": ["4x points at restaurants", "3x points on flights", "$120 dining credit"],
    "silver": ["2x points on groceries", "purchase protection"],
    "basic": ["1% cash back on all purchases"],
}
# units of each currency for one US dollar (a fixed table: a mock has no market)
_PER_USD = {"USD": 1.0, "EUR": 0.92, "GBP": 0.79, "JPY": 151.0, "CAD": 1.36, "AUD": 1.52,
            "KRW": 1370.0, "CHF": 0.88, "MXN": 17.1, "INR": 83.3, "CNY": 7.2}


def latency_s(tool: str, profile: str) -> float:
    if profile not in LATENCY_PROFILES:
        raise ValueError(f"unknown latency profile {profile!r} "
                         f"(choose {', '.join(LATENCY_PROFILES)})")
    base = NORMAL_LATENCY_S.get(tool, 0.3)
    return {"instant": 0.0, "normal": base, "slow": 3.0 * base}[profile]


def _number(*parts: object) -> int:
    """A stable number from the arguments (the same call, the same answer)."""
    text = "|".join(str(p).strip().lower() for p in parts)
    return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16)


def _code(prefix: str, *parts: object, width: int = 4) -> str:
    return f"{prefix}{_number(prefix, *parts) % 10 ** width:0{width}d}"


@dataclass
class MockState:
    """What one conversation has done so far (a server serves one sample)."""

    last_flights: list[dict] = field(default_factory=list)
    cart: list[dict] = field(default_factory=list)
    filters: dict[str, str] = field(default_factory=dict)
    bookings: list[str] = field(default_factory=list)


def search_flights(state: MockState, destination: str, date: str) -> dict:
    seed = _number(destination, date)
    flights = []
    for i in range(3):
        hour = 6 + (seed + 5 * i) % 14
        flights.append({
            "flight_id": _code("FL", destination, date, i, width=3),
            "airline": _AIRLINES[(seed + i) % len(_AIRLINES)],
            "destination": destination, "date": date,
            "departure_time": f"{hour:02d}:{(seed >> i) % 4 * 15:02d}",
            "price": 180 + (seed >> (2 * i)) % 600, "seats_left": 1 + (seed >> i) % 9})
    state.last_flights = flights
    return {"destination": destination, "date": date, "flights": flights}


def book_flight(state: MockState, passenger_name: str) -> dict:
    flight = state.last_flights[0] if state.last_flights else None
    reference = _code("BK", passenger_name, flight["flight_id"] if flight else "", width=5)
    state.bookings.append(reference)
    booked: dict[str, Any] = {"status": "confirmed", "booking_ref": reference,
                              "passenger_name": passenger_name}
    if flight is not None:
        booked.update(flight_id=flight["flight_id"], date=flight["date"],
                      destination=flight["destination"], price=flight["price"])
    return booked


def update_identity_doc(state: MockState, doc_type: str, doc_number: str) -> dict:
    return {"status": "updated", "doc_type": doc_type, "doc_number": doc_number,
            "confirmation": _code("ID", doc_type, doc_number, width=5)}


def get_card_benefits(state: MockState, card_type: str) -> dict:
    key = card_type.strip().lower().replace("card", "").strip()
    benefits = _CARDS.get(key)
    if benefits is None:
        return {"card_type": card_type, "benefits": [],
                "error": f"no card type {card_type!r} (known: {', '.join(_CARDS)})"}
    return {"card_type": key, "benefits": benefits,
            "annual_fee": {"platinum": 695, "gold": 250, "silver": 95, "basic": 0}[key]}


def get_exchange_rate(state: MockState, amount: float, from_currency: str,
                      to_currency: str) -> dict:
    source, target = from_currency.strip().upper(), to_currency.strip().upper()
    if source not in _PER_USD or target not in _PER_USD:
        return {"error": f"unknown currency code (known: {', '.join(_PER_USD)})"}
    rate = _PER_USD[target] / _PER_USD[source]
    return {"amount": amount, "from_currency": source, "to_currency": target,
            "rate": round(rate, 6), "converted_amount": round(float(amount) * rate, 2)}


def modify_autopay(state: MockState, bill_type: str, source_account: str) -> dict:
    return {"status": "updated", "bill_type": bill_type, "source_account": source_account,
            "next_payment_date": f"2026-{1 + _number(bill_type) % 12:02d}-15"}


def search_apartments(state: MockState, city: str, bedrooms: int, max_price: float) -> dict:
    seed = _number(city, bedrooms)
    found = []
    for i in range(4):
        rent = int(float(max_price) * (0.62 + 0.1 * i)) if max_price else 900 + 200 * i
        found.append({
            "apartment_id": _code("APT", city, bedrooms, i, width=3),
            "address": f"{100 + (seed >> i) % 900} {_STREETS[(seed + i) % len(_STREETS)]}, "
                       f"{city}",
            "bedrooms": bedrooms, "rent": rent, "pets_allowed": (seed >> i) % 2 == 0})
    if state.filters.get("pets_allowed", "").lower() in ("true", "yes", "1"):
        found = [a for a in found if a["pets_allowed"]]
    return {"city": city, "apartments": found, "filters": dict(state.filters)}


def calculate_commute(state: MockState, origin_address: str, destination_address: str,
                      mode: str = "driving") -> dict:
    seed = _number(origin_address, destination_address)
    speed = {"driving": 1.0, "transit": 1.6, "walking": 5.0, "cycling": 2.5}.get(
        mode.strip().lower(), 1.2)
    distance = 2 + seed % 25
    return {"origin_address": origin_address, "destination_address": destination_address,
            "mode": mode, "distance_km": distance, "duration_minutes": round(distance * 2 * speed)}


def update_search_filter(state: MockState, filter_name: str, value: str) -> dict:
    state.filters[filter_name] = str(value)
    return {"status": "updated", "filters": dict(state.filters)}


def track_order(state: MockState, order_id: str) -> dict:
    seed = _number(order_id)
    status = ("processing", "shipped", "out for delivery", "delivered")[seed % 4]
    return {"order_id": order_id, "status": status,
            "carrier": ("UPS", "FedEx", "DHL")[seed % 3],
            "estimated_delivery": f"2026-12-{1 + seed % 28:02d}"}


def search_products(state: MockState, query: str, max_price: float | None = None) -> dict:
    seed = _number(query)
    products = []
    for i in range(3):
        price = round(19.99 + (seed >> i) % 180, 2)
        if max_price is not None:
            price = round(min(price, float(max_price) * (0.55 + 0.15 * i)), 2)
        products.append({"product_id": _code("P", query, i, width=4),
                         "name": f"{query.title()} {('Pro', 'Lite', 'Max')[i]}",
                         "price": price, "rating": round(3.6 + ((seed >> i) % 14) / 10, 1)})
    return {"query": query, "products": products}


def add_to_cart(state: MockState, product_id: str, quantity: int = 1) -> dict:
    state.cart.append({"product_id": product_id, "quantity": int(quantity)})
    return {"status": "added", "cart": list(state.cart),
            "item_count": sum(item["quantity"] for item in state.cart)}


API: dict[str, Callable[..., dict]] = {
    "search_flights": search_flights, "book_flight": book_flight,
    "update_identity_doc": update_identity_doc, "get_card_benefits": get_card_benefits,
    "get_exchange_rate": get_exchange_rate, "modify_autopay": modify_autopay,
    "search_apartments": search_apartments, "calculate_commute": calculate_commute,
    "update_search_filter": update_search_filter, "track_order": track_order,
    "search_products": search_products, "add_to_cart": add_to_cart,
}
# The tools that change something (the MCP server marks them so; a run allows them all).
CHANGES = frozenset({"book_flight", "update_identity_doc", "modify_autopay",
                     "update_search_filter", "add_to_cart"})
TOOL_NAMES = tuple(API)
