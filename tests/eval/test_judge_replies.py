"""Each judge prompt's reply is read the way that prompt asks the judge to reply, never by the
first label the reply happens to mention (issue 19, item 19)."""

from __future__ import annotations

import pytest

from app.eval.judge import (
    NOT_ATTEMPTED,
    REPLY_FORMATS,
    UNREADABLE,
    judge_kinds,
    load_prompt,
    majority,
    read_verdict,
    reply_format,
)
from app.eval.qa_metrics import summarise


@pytest.mark.parametrize(("reply", "verdict"), [
    ("The answer is not correct: it names Sydney, the score is [Incorrect]", 0),
    ("It is correct, the capital is Canberra. the score is [Correct]", 1),
    ("Correct would be Canberra; the model said Sydney. The score is [Incorrect].", 0),
    ("the answer is incorrect", 0),  # no bracket: the reference's fallback
    ("I cannot decide", UNREADABLE),
])
def test_the_bracketed_score_decides(reply, verdict):
    assert read_verdict(reply, "bracketed") == verdict


@pytest.mark.parametrize(("reply", "verdict"), [
    ('{"analysis": "It names the correct city.", "judgment": "incorrect"}', 0),
    ('```json\n{"analysis": "Wrong, not the incorrect one.", "judgment": "correct"}\n```', 1),
    ("{'analysis': 'single quotes, correct', 'judgment': 'Incorrect'}", 0),
    ('{"analysis": "correct"}', UNREADABLE),  # no judgment field
    ("correct", UNREADABLE),  # not JSON at all
])
def test_the_json_judgment_field_decides(reply, verdict):
    assert read_verdict(reply, "json") == verdict


@pytest.mark.parametrize(("reply", "verdict"), [
    ("Yes", 1), ("No.", 0), ("yes\nbut the working says no", 1),
    ("No\nthe model's 120 would be yes for another problem", 0),
    ("The answer: yes", UNREADABLE),
])
def test_the_first_lines_yes_or_no_decides(reply, verdict):
    assert read_verdict(reply, "yes_no") == verdict


@pytest.mark.parametrize(("reply", "verdict"), [
    ("INCORRECT", 0), ("Correct.", 1), ("NOT_ATTEMPTED", NOT_ATTEMPTED),
    ("not correct", 0),  # the one-word prompts' negation is no "correct"
    ("INCORRECT — the model said correct things about Lyon", 0),
    ("It could be CORRECT or INCORRECT", UNREADABLE),  # two verdicts: unreadable
])
def test_one_word_replies(reply, verdict):
    assert read_verdict(reply, "one_word") == verdict


def test_every_prompt_names_a_reply_format_and_has_its_placeholders():
    for kind in judge_kinds():
        prompt = load_prompt(kind)
        assert all(p in prompt for p in ("{question}", "{gold}", "{response}")), kind
        assert reply_format(kind) in ("one_word", "bracketed", "json", "yes_no")
    assert set(REPLY_FORMATS) <= set(judge_kinds())


def test_not_attempted_is_left_out_of_the_averages_and_counted():
    rows = [{"resp": 1, "ref": 1, "n_span": 1, "n_ret": 1},
            {"resp": NOT_ATTEMPTED, "ref": 1, "n_span": 1, "n_ret": 1},
            {"resp": 0, "ref": NOT_ATTEMPTED, "n_span": 1, "n_ret": 1}]
    summary = summarise(rows)
    assert summary["resp"] == 0.5 and summary["n_resp_judged"] == 2
    assert summary["ref"] == 1.0 and summary["P(resp|ref)"] == 1.0
    assert summary["resp_unscored"]["not_attempted"] == 1
    assert summary["ref_unscored"]["not_attempted"] == 1
    assert majority([NOT_ATTEMPTED, NOT_ATTEMPTED, 1]) == NOT_ATTEMPTED
    assert majority([NOT_ATTEMPTED, 1, 1]) == 1
