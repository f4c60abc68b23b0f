"""A sample's result file as the benchmark's runner and agent would write it: a call's
arguments as the agent's typed function received them (converted by the tool's schema,
defaults filled), and the user's end of speech read from the recogniser's word times (the
benchmark reads it from ASR words), not from loudness, which a noisy recording keeps up to
its end."""

from __future__ import annotations

import numpy as np
import pytest

from app.conversation.run_records import EndRecord, ToolCallRecord, UserRecord
from app.eval.fdb3.mock_server import input_schemas
from app.eval.fdb3.result import make_result, voiced_end
from app.eval.fdb3.typed_arguments import typed_arguments
from app.frames import SAMPLE_RATE


@pytest.fixture(scope="module")
def schemas() -> dict:
    return input_schemas()  # our MCP server's, as the LLM is offered them


@pytest.mark.parametrize("function, written, received", [
    # "2" for an int and 2000 for a float, as LiveKit's pydantic gives them to the function
    ("search_apartments", {"city": "Austin", "bedrooms": "2", "max_price": 2000},
     {"city": "Austin", "bedrooms": 2, "max_price": 2000.0}),
    # defaults filled where the LLM left them out; a key the function lacks is not logged
    ("add_to_cart", {"product_id": "P1", "colour": "red"}, {"product_id": "P1", "quantity": 1}),
    ("calculate_commute", {"origin_address": "A", "destination_address": "B"},
     {"origin_address": "A", "destination_address": "B", "mode": "driving"}),
    ("search_products", {"query": "shoes"}, {"query": "shoes", "max_price": None}),
    ("search_products", {"query": "shoes", "max_price": "80"},
     {"query": "shoes", "max_price": 80.0}),
    ("get_exchange_rate", {"amount": "500", "from_currency": "USD", "to_currency": "EUR"},
     {"amount": 500.0, "from_currency": "USD", "to_currency": "EUR"}),
    # what pydantic cannot convert stays as written (the call itself failed on the server)
    ("add_to_cart", {"product_id": "P1", "quantity": "two"},
     {"product_id": "P1", "quantity": "two"}),
    ("not_a_tool", {"x": "1"}, {"x": "1"}),
])
def test_arguments_are_those_the_benchmarks_typed_function_receives(schemas, function,
                                                                    written, received):
    typed = typed_arguments(written, schemas.get(function))
    assert typed == received
    assert [type(v) for v in typed.values()] == [type(v) for v in received.values()]


def _call(function: str, arguments: dict, frame: int) -> ToolCallRecord:
    return ToolCallRecord(turn_id=1, tool=function, server="fdb3", server_tool=function,
                          arguments=arguments, ok=True, result="{}", frame=frame)


def _noisy_speech(seconds: float) -> np.ndarray:
    """Loud all through (-20 dBFS noise): no quiet stretch for the loudness to find."""
    rng = np.random.default_rng(3)
    return (0.1 * rng.standard_normal(int(seconds * SAMPLE_RATE))).astype(np.float32)


def test_the_result_types_the_calls_and_reads_the_user_end_from_the_words(schemas):
    pcm = _noisy_speech(12.0)
    assert voiced_end(pcm) == 12.0  # what the loudness said: the end of the file
    records = [
        UserRecord("find two bedroom places", 1.0, 3.0, "vad", 3.6,
                   (("find", 1.0, 1.3), ("two", 1.4, 1.6), ("bedroom", 1.7, 2.1),
                    ("places", 2.2, 2.7))),
        # more than 2 s later: a second turn, which the first turn's end does not include
        UserRecord("in austin", 5.5, 6.4, "vad", 7.0, (("in", 5.5, 5.7), ("austin", 5.8, 6.4))),
        # a word after the input (in the silence added after it) is not the user's
        UserRecord("mm", 12.5, 12.6, "vad", 13.2, (("mm", 12.5, 12.6),)),
        _call("search_apartments", {"city": "Austin", "bedrooms": "2", "max_price": 2000}, 60),
        EndRecord(frames=200, reason="end of input"),
    ]
    result = make_result("housing_01", "0" * 24, {"domain": "housing_location"}, "ours",
                         records, pcm, {}, schemas)
    assert result["user_speech_end_rel"] == 2.7
    assert result["input_transcript"] == "find two bedroom places in austin"
    assert result["input_asr_chunks"][0] == {"text": "find", "timestamp": [1.0, 1.3]}
    call = result["actual_tool_calls"][0]
    assert call["args"] == {"city": "Austin", "bedrooms": 2, "max_price": 2000.0}
    assert call["llm_args"] == {"city": "Austin", "bedrooms": "2", "max_price": 2000}
    assert "elapsed_ms" not in call  # the machine's time: in the run log, not the result


def test_without_a_gap_the_user_end_is_the_last_words_and_without_words_none():
    pcm = _noisy_speech(8.0)
    one_turn = [UserRecord("hello there", 0.5, 1.9, "vad", 2.5,
                           (("hello", 0.5, 0.9), ("there", 1.0, 1.9))),
                UserRecord("again", 3.0, 3.6, "vad", 4.2, (("again", 3.0, 3.6),))]
    assert make_result("x", "0" * 24, {}, "ours", one_turn, pcm, {})["user_speech_end_rel"] \
        == 3.6
    silent = make_result("x", "0" * 24, {}, "ours", [], pcm, {})
    assert silent["user_speech_end_rel"] is None and "perceived_total_latency" not in silent
