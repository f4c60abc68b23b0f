"""Our Full-Duplex-Bench v3 scorer against results worked out by hand: extra, missing and
reordered calls, `$RESULT_n` references (right, wrong, and to a call that never happened),
the strict pass rate with its failure kinds, the latencies, and the judge through the real
`ollama` client against the stand-in (its replies read, an unreadable one falling back)."""

from __future__ import annotations

import json

import pytest

from app.eval.fdb3.judge import ToolJudge, read_correct
from app.eval.fdb3.report import write_report
from app.eval.fdb3.score import aggregate, score_results, score_scenario
from app.llm.ollama_backend import OllamaBackend, OllamaSettings
from app.llm.ollama_standin import OllamaStandIn, ScriptedReply

SCENARIO = {
    "id": "travel_07", "domain": "travel_identity", "title": "Search, book, update",
    "difficulty": "hard", "disfluency_features": ["SELF_CORRECTION"],
    "state_rollback_test": True,
    "dialogue": [{"user": "…", "ai": "I booked the Rome flight and updated your passport."}],
    "expected_tool_calls": [
        {"function": "search_flights", "args": {"destination": "Rome", "date": "October 5"}},
        {"function": "book_flight", "args": {"passenger_name": "Sam Lee",
                                              "flight_id": "$RESULT_0.flights[1].flight_id"}},
        {"function": "update_identity_doc", "args": {"doc_type": "driver_license",
                                                      "doc_number": "X12345"}},
    ],
}
FLIGHTS = json.dumps({"flights": [{"flight_id": "FL1"}, {"flight_id": "FL2"}]})


def call(function: str, args: dict, result: str = "{}", at: float = 9.0) -> dict:
    return {"function": function, "args": args, "result": result, "timestamp_start": at,
            "called_at": at - 0.5}


def result(*calls: dict, transcript: str = "done", user_end: float = 5.0,
           first_word: float | None = 6.0) -> dict:
    words = [] if first_word is None else [{"text": "done", "timestamp": [first_word, 6.2]},
                                          {"text": "and", "timestamp": [8.5, 8.7]},
                                          {"text": "now", "timestamp": [9.5, 9.7]}]
    out = {"example_id": "travel_07", "actual_tool_calls": list(calls),
           "transcript": transcript, "asr_chunks": words, "user_speech_end_rel": user_end}
    if first_word is not None:
        out["audio_agent_speech_start"] = first_word
    return out


SEARCH = call("search_flights", {"destination": "rome", "date": "October 5"}, FLIGHTS, 7.0)
BOOK = call("book_flight", {"passenger_name": "Sam Lee", "flight_id": "FL2"}, at=8.0)
UPDATE = call("update_identity_doc", {"doc_type": "driver license", "doc_number": "X12345"})


def test_all_three_right_in_another_order_passes():
    row = score_scenario(SCENARIO, result(UPDATE, SEARCH, BOOK))
    assert row["tool_selection"]["score"] == 1.0
    assert row["arguments"]["exact"] == 1.0 and row["arguments"]["resolved"] == 1.0
    assert row["passed"] == {"exact": True, "resolved": True} and row["failure"] == ""


def test_a_missing_call_costs_recall_and_its_arguments():
    row = score_scenario(SCENARIO, result(SEARCH, BOOK))
    selection = row["tool_selection"]
    assert (selection["recall"], selection["precision"], selection["score"]) == (0.667, 1.0,
                                                                                  0.8)
    assert selection["unmatched_expected"] == ["update_identity_doc"]
    assert row["arguments"]["exact"] == 0.667  # 2 of 3 expected calls right
    assert not row["passed"]["exact"] and row["failure"] == "wrong_tools"
    assert row["failure_reason"] == "missing tools: ['update_identity_doc']"


def test_an_extra_call_costs_precision_and_fails_the_strict_pass():
    extra = call("search_flights", {"destination": "Paris", "date": "October 5"}, FLIGHTS)
    row = score_scenario(SCENARIO, result(SEARCH, extra, BOOK, UPDATE))
    selection = row["tool_selection"]
    assert (selection["recall"], selection["precision"]) == (1.0, 0.75)
    assert selection["score"] == 0.857 and selection["unexpected_calls"] == ["search_flights"]
    assert row["arguments"]["exact"] == 1.0  # the first search pairs with the expected one
    assert row["failure"] == "wrong_tools"


def test_the_first_call_of_a_function_is_the_one_paired():
    paris_first = call("search_flights", {"destination": "Paris", "date": "October 5"}, FLIGHTS)
    row = score_scenario(SCENARIO, result(paris_first, SEARCH, BOOK, UPDATE))
    details = row["arguments"]["details"]
    assert details[0]["exact"] is False and "destination" in details[0]["why"]
    assert row["arguments"]["exact"] == 0.667


def test_references_are_skipped_by_exact_matching_and_checked_when_resolved():
    wrong_id = call("book_flight", {"passenger_name": "Sam Lee", "flight_id": "FL1"})
    row = score_scenario(SCENARIO, result(SEARCH, wrong_id, UPDATE))
    assert row["arguments"]["exact"] == 1.0  # the benchmark's exact rule does not check it
    assert row["arguments"]["resolved"] == 0.667
    assert row["arguments"]["details"][1]["why_resolved"] == (
        "flight_id: $RESULT_0.flights[1].flight_id is 'FL2', got 'FL1'")
    assert row["passed"] == {"exact": True, "resolved": False}
    # A reference to a call that was never made resolves to nothing.
    scenario = {**SCENARIO, "expected_tool_calls": SCENARIO["expected_tool_calls"][1:2]}
    alone = score_scenario(scenario, result(BOOK))
    assert alone["arguments"]["resolved"] == 0.0
    assert "names nothing" in alone["arguments"]["details"][0]["why_resolved"]


def test_exact_matching_reads_case_underscores_and_a_missing_key():
    wrong = call("update_identity_doc", {"doc_type": "passport", "doc_number": "X12345"})
    missing = call("update_identity_doc", {"doc_number": "X12345"})
    assert score_scenario(SCENARIO, result(SEARCH, BOOK, wrong))["arguments"]["details"][2][
        "why"] == "doc_type: expected 'driver_license', got 'passport'"
    assert score_scenario(SCENARIO, result(SEARCH, BOOK, missing))["arguments"]["details"][2][
        "why"] == "missing argument: doc_type"


def test_latencies_and_turn_taking():
    row = score_scenario(SCENARIO, result(SEARCH, BOOK, UPDATE))
    # The first call was made at 6.5 s; the last answer landed at 9.0 s, the next word 9.5 s.
    assert row["latency"] == {"first_response_s": 1.0, "tool_call_s": 1.5,
                              "task_completion_s": 4.5}
    silent = score_scenario(SCENARIO, result(SEARCH, transcript="", first_word=None))
    assert not silent["turn_taken"] and silent["latency"]["first_response_s"] is None
    early = score_scenario(SCENARIO, result(SEARCH, BOOK, UPDATE, first_word=4.0))
    assert early["latency"]["first_response_s"] == -1.0  # spoke before the user ended


def test_the_aggregate_averages_over_turn_taken_and_passes_over_all():
    rows = [score_scenario(SCENARIO, result(UPDATE, SEARCH, BOOK)),  # pass
            score_scenario(SCENARIO, result(SEARCH, BOOK)),  # missing one
            score_scenario({**SCENARIO, "domain": "finance_billing", "difficulty": "easy"},
                           result(SEARCH, transcript="", first_word=None))]  # silent
    overall = aggregate(rows, judged=False)
    assert overall["turn_taking"] == {"turn_taken": 2, "no_response": 1,
                                      "turn_take_rate": 0.667}
    assert overall["by_metric"]["tool_selection"] == 0.9  # (1 + 0.8) / 2
    assert overall["by_metric_all"]["tool_selection"] == round((1 + 0.8 + 0.5) / 3, 3)
    assert overall["pass_rate"]["strict"] == 0.333
    assert overall["pass_rate"]["failure_breakdown"] == {"wrong_tools": 2, "wrong_arguments": 0}
    assert overall["by_domain"]["finance_billing"]["pass_rate"] == 0.0
    assert overall["by_difficulty"]["hard"]["pass_rate"] == 0.5
    assert overall["by_disfluency"]["SELF_CORRECTION"]["n"] == 3
    assert overall["latency"]["first_response_s"]["mean"] == 1.0


def test_judge_replies_are_read_and_an_unreadable_one_falls_back():
    assert read_correct('```json\n{"correct": true, "explanation": "same date"}\n```') is True
    assert read_correct("{'correct': 'false'}") is False
    assert read_correct("I think it is right") is None


@pytest.fixture()
def judge():
    def script(body: dict) -> ScriptedReply:
        prompt = body["messages"][0]["content"]
        if prompt.startswith("You check whether a voice agent called"):
            if '"date": "2026-10-05"' in prompt:  # another format of the same date
                return ScriptedReply(content='{"correct": true, "explanation": "same date"}')
            if "update_identity_doc" in prompt:
                return ScriptedReply(content="hmm, hard to say")  # unreadable
            return ScriptedReply(content='{"correct": false, "explanation": "differs"}')
        return ScriptedReply(content='{"correct": true, "explanation": "booked and updated"}')

    with OllamaStandIn(script=script) as standin:
        backend = OllamaBackend(OllamaSettings(host=standin.url, model="standin:latest",
                                               timeout_s=10.0, connect_timeout_s=1.0))
        yield ToolJudge(backend, "standin"), standin


def test_the_judge_decides_arguments_and_responses(judge):
    tool_judge, standin = judge
    iso = call("search_flights", {"destination": "Rome", "date": "2026-10-05"}, FLIGHTS)
    row = score_scenario(SCENARIO, result(iso, BOOK, UPDATE), tool_judge)
    details = row["arguments"]["details"]
    assert [d["exact"] for d in details] == [False, True, True]
    # search: the judge forgives the date; book: it says no; update: unreadable, so exact.
    assert [d["judged"] for d in details] == [True, False, True]
    assert row["arguments"]["judged"] == 0.667
    assert row["response"]["score"] == 1.0
    asked = [r["messages"][0]["content"] for r in standin.requests]
    book_prompt = next(p for p in asked if "book_flight" in p)
    assert 'References: $RESULT_0.flights[1].flight_id is "FL2"' in book_prompt
    assert not row["passed"]["judged"] and row["failure"] == "wrong_arguments"


def test_results_in_the_released_layout_are_scored_and_reported(tmp_path):
    folder = tmp_path / "travel_07_65e8cf8f4c7424fa062e54a3"
    folder.mkdir()
    (folder / "input.wav").write_bytes(b"")
    (folder / "metadata.json").write_text(json.dumps(SCENARIO))
    (folder / "result_ours.json").write_text(json.dumps(result(SEARCH, BOOK, UPDATE)))
    other = tmp_path / "travel_08_65e8cf8f4c7424fa062e54a3"
    other.mkdir()
    (other / "input.wav").write_bytes(b"")
    (other / "metadata.json").write_text(json.dumps({"id": "travel_08"}))
    (other / "result_ours.json").write_text("{}")
    scores = score_results(tmp_path, "ours")
    assert scores["overall"]["pass_rate"]["strict"] == 1.0
    assert scores["not_scored"] == [(other.name, "no expected_tool_calls: give --benchmark "
                                                 "benchmark_data_v2.json")]
    paths = write_report(tmp_path, "ours", scores)
    text = paths["markdown"].read_text()
    assert "| pass rate (strict) | 1.000 | 0.470 |" in text
    assert "| tool selection (F1) | 1.000 | 0.855 |" in text
    assert json.loads(paths["json"].read_text())["provider"] == "ours"


def test_results_whose_scenarios_lack_the_expected_calls_are_said_so(tmp_path):
    """The released folders' metadata.json have no expected calls: scoring without
    --benchmark names that, not "no result_X.json" (the results are there)."""
    for name in ("travel_07_65e8cf8f4c7424fa062e54a3", "travel_08_65e8cf8f4c7424fa062e54a3"):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "input.wav").write_bytes(b"")
        (folder / "metadata.json").write_text(json.dumps({"id": name[:9], "domain": "x"}))
        (folder / "result_ours.json").write_text(json.dumps(result(SEARCH)))
    with pytest.raises(ValueError) as refused:
        score_results(tmp_path, "ours")
    assert str(refused.value) == (
        f"nothing to score under {tmp_path}: 2 result_ours.json found, but their scenarios "
        "have no expected_tool_calls in their metadata.json (the released folders' lack "
        "them): give --benchmark benchmark_data_v2.json")
    benchmark = tmp_path / "benchmark_data_v2.json"
    benchmark.write_text(json.dumps({"scenarios": [{"id": "other"}]}))
    with pytest.raises(ValueError, match="neither in their metadata.json nor in the "
                                         "--benchmark file"):
        score_results(tmp_path, "ours", benchmark=benchmark)
    benchmark.write_text(json.dumps([{**SCENARIO, "id": "travel_07"}]))
    assert score_results(tmp_path, "ours", benchmark=benchmark)["overall"]["scenarios"] == 1
