"""The demo set's scenarios (`eval fdb3 make-demo`): ours, in the benchmark's shape, so that the
whole path runs on a CPU: all 4 domains, easy to hard (1, 2, 3 expected calls), disfluent
speech (fillers, a self-correction, a false start), `$RESULT_n` references.

Each carries what the stand-in LLM will do (`contextspan_standin`: its rounds of calls and
its answer; `eval fdb3 run --llm standin` plays it). Most plans do what is expected; some
deviate on purpose, each one way a model goes wrong, so the demo's report has numbers that
can be checked by hand (docs/fdb3.md works them out):
- travel easy: the date as ISO, not as expected ("2026-08-20" for "August 20"): exact
  matching fails the argument, a judge forgives it;
- travel hard: the last call is missing;
- finance medium: the two calls in the other order (the scorers match as a multiset);
- finance hard: one call too many (two in its first round);
- housing hard and ecommerce hard: one argument wrong.
Two write their arguments as LLMs often do, and are right all the same, as the benchmark's
agent types them (typed_arguments.py): housing easy gives the numbers as strings ("2"),
ecommerce medium leaves add_to_cart's quantity to its default.
"""

from __future__ import annotations

from typing import Any

# (id, domain, title, difficulty, disfluency features, rollback, the user's words,
#  expected calls, the assistant's expected reply, the stand-in's rounds, its answer)
_DEMO: tuple[tuple[Any, ...], ...] = (
    ("demo_travel_01", "travel_identity", "Search flights", "easy", ["FILLER"], False,
     "Um, can you find me flights to, uh, London on August twentieth?",
     [("search_flights", {"destination": "London", "date": "August 20"})],
     "Here are the flights to London on August 20.",
     [[("search_flights", {"destination": "London", "date": "2026-08-20"})]],
     "I found three flights to London on August twentieth."),
    ("demo_travel_02", "travel_identity", "Search and book a flight", "medium",
     ["HESITATION"], False,
     "I need a flight to Tokyo on, hmm, September third, and book it for Maria Lopez.",
     [("search_flights", {"destination": "Tokyo", "date": "September 3"}),
      ("book_flight", {"passenger_name": "Maria Lopez"})],
     "I booked the flight to Tokyo on September 3 for Maria Lopez.",
     [[("search_flights", {"destination": "Tokyo", "date": "September 3"})],
      [("book_flight", {"passenger_name": "Maria Lopez"})]],
     "Your flight to Tokyo is booked for Maria Lopez."),
    ("demo_travel_03", "travel_identity", "Search, book and update a passport", "hard",
     ["SELF_CORRECTION", "FILLER"], True,
     "Find flights to Paris, no wait, to Rome on October fifth, book one for Sam Lee, and "
     "update my passport number to X one two three four five.",
     [("search_flights", {"destination": "Rome", "date": "October 5"}),
      ("book_flight", {"passenger_name": "Sam Lee"}),
      ("update_identity_doc", {"doc_type": "passport", "doc_number": "X12345"})],
     "I booked the Rome flight for Sam Lee and updated the passport number.",
     [[("search_flights", {"destination": "Rome", "date": "October 5"})],
      [("book_flight", {"passenger_name": "Sam Lee"})]],
     "The Rome flight is booked for Sam Lee."),
    ("demo_finance_01", "finance_billing", "Card benefits", "easy", ["FILLER"], False,
     "What benefits do I get with my, um, platinum card?",
     [("get_card_benefits", {"card_type": "platinum"})],
     "Here are the platinum card's benefits.",
     [[("get_card_benefits", {"card_type": "platinum"})]],
     "Your platinum card gives lounge access and no foreign transaction fees."),
    ("demo_finance_02", "finance_billing", "Exchange and autopay", "medium", ["PAUSE"], False,
     "How much is five hundred dollars in euros? And set the autopay of my credit card "
     "to come from checking.",
     [("get_exchange_rate", {"amount": 500, "from_currency": "USD", "to_currency": "EUR"}),
      ("modify_autopay", {"bill_type": "credit_card", "source_account": "checking"})],
     "Five hundred dollars is about four hundred sixty euros, and the autopay is set.",
     [[("modify_autopay", {"bill_type": "credit_card", "source_account": "checking"})],
      [("get_exchange_rate", {"amount": 500, "from_currency": "USD", "to_currency": "EUR"})]],
     "The autopay is set, and five hundred dollars is four hundred sixty euros."),
    ("demo_finance_03", "finance_billing", "Benefits, exchange and autopay", "hard",
     ["SELF_CORRECTION"], True,
     "Check the gold card benefits, then convert two hundred pounds to dollars, and switch "
     "my utilities autopay to savings, I mean, to checking.",
     [("get_card_benefits", {"card_type": "gold"}),
      ("get_exchange_rate", {"amount": 200, "from_currency": "GBP", "to_currency": "USD"}),
      ("modify_autopay", {"bill_type": "utilities", "source_account": "checking"})],
     "I checked the gold card, converted the pounds and moved the utilities autopay to "
     "checking.",
     [[("get_card_benefits", {"card_type": "gold"}),
       ("get_card_benefits", {"card_type": "platinum"})],
      [("get_exchange_rate", {"amount": 200, "from_currency": "GBP", "to_currency": "USD"})],
      [("modify_autopay", {"bill_type": "utilities", "source_account": "checking"})]],
     "Done: gold card benefits, about two hundred fifty dollars, and autopay from checking."),
    ("demo_housing_01", "housing_location", "Search apartments", "easy", ["FILLER"], False,
     "Show me two bedroom apartments in Austin under, uh, two thousand dollars.",
     [("search_apartments", {"city": "Austin", "bedrooms": 2, "max_price": 2000})],
     "Here are two bedroom apartments in Austin under two thousand dollars.",
     [[("search_apartments", {"city": "Austin", "bedrooms": "2", "max_price": "2000"})]],
     "I found four apartments in Austin in your budget."),
    ("demo_housing_02", "housing_location", "Apartments and a commute", "medium",
     ["HESITATION"], False,
     "Find one bedroom places in Denver below fifteen hundred, and how long is the "
     "commute from the first one to Union Station?",
     [("search_apartments", {"city": "Denver", "bedrooms": 1, "max_price": 1500}),
      ("calculate_commute", {"origin_address": "$RESULT_0.apartments[0].address",
                             "destination_address": "Union Station"})],
     "The first Denver apartment is a short drive from Union Station.",
     [[("search_apartments", {"city": "Denver", "bedrooms": 1, "max_price": 1500})],
      [("calculate_commute", {"origin_address": "$RESULT_0.apartments[0].address",
                              "destination_address": "Union Station"})]],
     "The first apartment is about twenty minutes from Union Station."),
    ("demo_housing_03", "housing_location", "Apartments, a filter and a commute", "hard",
     ["FALSE_START"], True,
     "Look for, look for three bedroom apartments in Seattle under three thousand, only "
     "pet friendly ones, and what is the transit commute from the first one to Pike Place?",
     [("search_apartments", {"city": "Seattle", "bedrooms": 3, "max_price": 3000}),
      ("update_search_filter", {"filter_name": "pets_allowed", "value": "true"}),
      ("calculate_commute", {"origin_address": "$RESULT_0.apartments[0].address",
                             "destination_address": "Pike Place", "mode": "transit"})],
     "I filtered for pets and found the transit commute to Pike Place.",
     [[("search_apartments", {"city": "Seattle", "bedrooms": 3, "max_price": 3000})],
      [("update_search_filter", {"filter_name": "pets", "value": "true"})],
      [("calculate_commute", {"origin_address": "$RESULT_0.apartments[0].address",
                              "destination_address": "Pike Place", "mode": "transit"})]],
     "Pet friendly places are shown, and the commute by transit is half an hour."),
    ("demo_ecommerce_01", "ecommerce_support", "Track an order", "easy", ["FILLER"], False,
     "Where is my order, um, B O B one two?",
     [("track_order", {"order_id": "BOB12"})],
     "Here is where order BOB12 is.",
     [[("track_order", {"order_id": "BOB12"})]],
     "Your order BOB12 is on its way."),
    ("demo_ecommerce_02", "ecommerce_support", "Search and add to cart", "medium",
     ["PAUSE"], False,
     "Search for wireless headphones under a hundred dollars, and add the first one to my "
     "cart.",
     [("search_products", {"query": "wireless headphones", "max_price": 100}),
      ("add_to_cart", {"product_id": "$RESULT_0.products[0].product_id", "quantity": 1})],
     "I added the first wireless headphones to your cart.",
     [[("search_products", {"query": "wireless headphones", "max_price": 100})],
      [("add_to_cart", {"product_id": "$RESULT_0.products[0].product_id"})]],
     "The headphones are in your cart."),
    ("demo_ecommerce_03", "ecommerce_support", "Track, search and add two", "hard",
     ["FILLER", "HESITATION"], True,
     "Track order K seven seven, then find running shoes, uh, under eighty dollars, and "
     "put two pairs of the first ones in my cart.",
     [("track_order", {"order_id": "K77"}),
      ("search_products", {"query": "running shoes", "max_price": 80}),
      ("add_to_cart", {"product_id": "$RESULT_1.products[0].product_id", "quantity": 2})],
     "Order K77 is tracked and two pairs of running shoes are in the cart.",
     [[("track_order", {"order_id": "K77"})],
      [("search_products", {"query": "running shoes", "max_price": 80})],
      [("add_to_cart", {"product_id": "$RESULT_1.products[0].product_id", "quantity": 1})]],
     "Your order is shipped and the running shoes are in your cart."),
)
VOICES = ("en-us", "en-gb", "en-gb-scotland")  # three espeak-ng speakers


def demo_scenarios() -> list[dict[str, Any]]:
    """The demo's metadata.json contents, one per sample, in the benchmark's shape."""
    scenarios = []
    for (ident, domain, title, difficulty, features, rollback, said, expected, reply, plan,
         answer) in _DEMO:
        scenarios.append({
            "id": ident, "domain": domain, "title": title, "difficulty": difficulty,
            "num_expected_calls": len(expected), "disfluency_features": list(features),
            "state_rollback_test": rollback,
            "dialogue": [{"user": said, "ai": reply}],
            "expected_tool_calls": [{"function": f, "args": dict(a)} for f, a in expected],
            "contextspan_standin": {
                "rounds": [[{"function": f, "args": dict(a)} for f, a in step]
                           for step in plan],
                "answer": answer},
        })
    return scenarios
