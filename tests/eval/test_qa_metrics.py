"""The QA metrics against hand-built transcripts with known answers (the reference scorer's
definitions), and the judge's verdict reading."""

from __future__ import annotations

import pytest

from app.conversation.run_records import read_records
from app.eval.judge import NOT_ATTEMPTED, UNREADABLE, Judge, majority, read_verdict
from app.eval.qa_events import text_stream, trigger_events
from app.eval.qa_metrics import ItemOutcome, item_row, summarise
from app.llm.ollama_standin import OllamaStandIn, ScriptedReply


def ret_item() -> list[dict]:
    """Two <ret>s: the first (frame 50) lands its span before frame 63; the second (frame
    100) is late."""
    return [
        {"type": "run", "frames": 200},
        {"type": "text", "frame": 40, "text": "Let me"},
        {"type": "text", "frame": 41, "text": " check<ret>"},
        {"type": "ret", "frame": 50, "time": 4.0},
        {"type": "question", "turn_id": 1, "ret_frame": 50, "question": "capital of peru",
         "plan": "cache", "waited_ms": 0.0},
        {"type": "span_queued", "turn_id": 1, "span_id": 7, "text": "Lima is the capital.",
         "source": "llm"},
        {"type": "span", "span_id": 7, "source": "llm", "text": "Lima is the capital.",
         "chunks": [{"before_frame": 61, "k": 8}, {"before_frame": 63, "k": 4}],
         "ret_frame": 50},
        {"type": "text", "frame": 70, "text": " it is Lima."},
        {"type": "ret", "frame": 100, "time": 8.0},
        {"type": "question", "turn_id": 2, "ret_frame": 100, "question": "and bolivia",
         "plan": "window", "waited_ms": 0.0},
        {"type": "late", "turn_id": 2, "ret_frame": 100, "question": "and bolivia",
         "seconds": 3.1, "source": "llm", "dropped_by": "orchestrator"},
    ]


def test_ret_events_and_latencies():
    records = read_records(ret_item())
    events = trigger_events(records)
    assert [(e["t"], e["outcome"], e["inject"]) for e in events] == [
        (4.0, "span", "Lima is the capital."), (8.0, "late", None)]
    assert events[0]["t_inj"] == pytest.approx(63 * 0.08)  # the span's last chunk
    assert text_stream(records) == "Let me check it is Lima."
    row = item_row(ItemOutcome("a", "q", "Lima", 3.0, text_stream(records), tuple(events)),
                   resp=1, ref=1)
    assert row["n_ret"] == 2 and row["n_span"] == 1
    assert row["ret_lat_s"] == 1.0  # <ret> at 4.0 s, the question ended at 3.0 s
    assert row["inj_lat_s"] == pytest.approx(1.04)


def test_end_of_turn_events_come_from_turns():
    records = read_records([
        {"type": "turn", "turn_id": 3, "question": "who wrote hamlet", "trigger": "end_of_turn",
         "frame": 30},
        {"type": "span_queued", "turn_id": 3, "span_id": 1, "text": "Shakespeare.",
         "source": "llm"},
        {"type": "span", "span_id": 1, "source": "llm", "text": "Shakespeare.",
         "chunks": [{"before_frame": 40, "k": 4}]},
        {"type": "turn", "turn_id": 4, "question": "hm", "trigger": "end_of_turn", "frame": 90},
        {"type": "no_span", "turn_id": 4, "ret_frame": 90, "question": "hm",
         "reason": "the LLM found no information"},
    ])
    events = trigger_events(records)
    assert [(e["t"], e["t_inj"], e["outcome"]) for e in events] == [
        (2.4, 3.2, "span"), (7.2, None, "no span: the LLM found no information")]


def test_a_retrieval_still_in_flight_at_the_end_is_not_a_completed_one():
    """ret_rate counts retrievals whose answer came back, as the reference's runner records
    a retrieval only then; one the input ended before is counted apart."""
    records = read_records([
        {"type": "question", "turn_id": 1, "ret_frame": 50, "question": "capital of peru"},
        {"type": "no_span", "turn_id": 1, "ret_frame": 50, "question": "capital of peru",
         "reason": "the LLM found no information"},
        {"type": "question", "turn_id": 2, "ret_frame": 150, "question": "and bolivia"},
    ])  # turn 2's answer had not come back when the input ended
    events = trigger_events(records)
    assert [e["outcome"] for e in events] == ["no span: the LLM found no information",
                                              "in flight when the input ended"]
    row = item_row(ItemOutcome("a", "q", "Lima", 3.0, "", tuple(events)), resp=0, ref=None)
    assert row["n_ret"] == 1 and row["n_ret_in_flight"] == 1
    only_in_flight = item_row(ItemOutcome("b", "q", "x", 3.0, "", (events[1],)), 0, None)
    earlier_run = item_row(ItemOutcome("c", "q", "x", 3.0, "",
                                       ({**events[1], "outcome": "no answer"},)), 0, None)
    assert only_in_flight["n_ret"] == 0 and earlier_run["n_ret"] == 0
    summary = summarise([row, only_in_flight, earlier_run])
    assert summary["ret_rate"] == round(1 / 3, 4) and summary["ret_in_flight"] == 3


def test_reference_style_prompts_see_every_valid_answer_as_the_reference_shows_them():
    from app.eval.judge import answer_variants, shown_gold
    from app.llm.factory import make_backend

    gold = "Paris | aliases: paris city, PARIS, Lutetia"
    assert answer_variants(gold) == ["Paris", "paris city", "Lutetia"]
    assert answer_variants("5; five") == ["5", "five"] and answer_variants("42") == ["42"]
    assert shown_gold("short_answer", gold) == gold  # ours: the gold string itself
    with OllamaStandIn(models=("standin:latest",),
                       script=[ScriptedReply(content="the score is [Correct]")]) as standin:
        judge = Judge(make_backend("ollama", standin.url, "standin:latest", timeout_s=10.0,
                                   temperature=0.0))
        assert judge.grade("simple_qa", "Capital of France?", gold, "Lutetia.").value == 1
        prompt = list(standin.requests)[0]["messages"][0]["content"]
    assert "['Paris', 'paris city', 'Lutetia']" in prompt and "aliases:" not in prompt


def test_no_trigger_no_span():
    row = item_row(ItemOutcome("b", "q", "x", 2.0, "", ()), resp=None, ref=None)
    assert row["n_ret"] == 0 and row["n_span"] == 0 and row["ref"] is None
    assert "ret_lat_s" not in row and "inj_lat_s" not in row


def test_summary_excludes_and_counts_what_the_judge_could_not_score():
    def row(resp, ref, spans=1, rets=1, ret_lat=None, inj_lat=None):
        r = {"resp": resp, "ref": ref, "n_span": spans, "n_ret": rets}
        if ret_lat is not None:
            r["ret_lat_s"], r["inj_lat_s"] = ret_lat, inj_lat
        return r

    rows = [row(1, 1, ret_lat=0.5, inj_lat=1.0), row(0, 1, ret_lat=1.5, inj_lat=2.0),
            row(1, 0, ret_lat=1.0, inj_lat=0.0), row(None, UNREADABLE),
            row(UNREADABLE, None, spans=0), row(0, None, spans=0, rets=0)]
    s = summarise(rows)
    assert s["n"] == 6
    assert s["resp"] == 0.5 and s["n_resp_judged"] == 4  # 1, 0, 1, 0
    assert s["resp_unscored"] == {"empty": 1, "unreadable": 1, "not_attempted": 0}
    assert s["ref"] == 0.6667  # 1, 1, 0; the unreadable one left out
    assert s["ref_unscored"] == {"empty": 0, "unreadable": 1, "not_attempted": 0}
    assert s["P(resp|ref)"] == 0.5 and s["n_ref_correct"] == 2  # resp over ref == 1
    assert s["ret_rate"] == round(5 / 6, 4) and s["span_rate"] == round(4 / 6, 4)
    assert s["ret_lat_s"] == 1.0 and s["inj_lat_s"] == 1.0


def test_empty_set_has_no_rates():
    s = summarise([])
    assert s["n"] == 0 and s["resp"] is None and s["ret_rate"] is None


@pytest.mark.parametrize(("reply", "verdict"), [
    ("CORRECT", 1), ("Incorrect.", 0), ("INCORRECT — it says Lyon", 0),
    ("not attempted", NOT_ATTEMPTED), ("NOT_ATTEMPTED", NOT_ATTEMPTED),
    ("The answer is correct", 1),
    ("I cannot tell", UNREADABLE), ("", UNREADABLE)])
def test_verdicts(reply, verdict):
    assert read_verdict(reply) == verdict


def test_majority_of_readable_votes():
    assert majority([1, 1, 0]) == 1
    assert majority([1, 0]) == 0  # a tie is not a majority
    assert majority([1, UNREADABLE, UNREADABLE]) == 1
    assert majority([UNREADABLE]) == UNREADABLE


def test_judge_through_the_stand_in():
    from app.llm.factory import make_backend

    replies = [ScriptedReply(content="CORRECT"), ScriptedReply(content="hmm"),
               ScriptedReply(content="INCORRECT"), ScriptedReply(content="CORRECT")]
    with OllamaStandIn(models=("standin:latest",), script=replies) as standin:
        judge = Judge(make_backend("ollama", standin.url, "standin:latest", timeout_s=10.0,
                                   temperature=1.0), samples=4)
        assert judge.grade("short_answer", "q", "Paris", "   ").value is None  # not asked
        verdict = judge.grade("short_answer", "Capital of France?", "Paris | aliases: x",
                              "It is {Paris}.")
        requests = list(standin.requests)
    assert verdict.votes == [1, UNREADABLE, 0, 1] and verdict.value == 1
    assert len(requests) == 4 and requests[0]["options"]["temperature"] == 1.0
    prompt = requests[0]["messages"][0]["content"]
    assert "Gold answer (any of the listed aliases counts): Paris | aliases: x" in prompt
    assert "It is {Paris}." in prompt


def test_an_unreachable_judge_gives_unreadable_not_a_crash():
    from app.llm.factory import make_backend

    judge = Judge(make_backend("ollama", "http://127.0.0.1:9", "m", timeout_s=2.0,
                               temperature=0.0))
    verdict = judge.grade("math", "1+1?", "2", "two")
    assert verdict.value == UNREADABLE and verdict.errors
