"""`eval make-set`'s facts: fresh, unguessable, and written only where local search reads."""

from __future__ import annotations

import json

import pytest

from app.eval.make_set import MakeSetError, make_facts, make_span_set


def test_facts_are_seeded_distinct_and_absent_from_their_questions():
    facts = make_facts(30, seed=11)
    assert [f.answer for f in facts] == [f.answer for f in make_facts(30, seed=11)]
    assert [f.answer for f in facts] != [f.answer for f in make_facts(30, seed=12)]
    assert len({f.topic for f in facts}) == 30  # one fact per invented name
    for fact in facts:
        assert fact.answer not in fact.question and fact.answer in fact.sentence
        assert fact.topic in fact.question


def test_the_set_layout(tmp_path):
    out = make_span_set(tmp_path / "set", 3, seed=5)
    meta = json.loads((out / "meta.json").read_text())
    described = json.loads((out / "set.json").read_text())
    assert described["judge"] == "span_fact" and described["search_folder"] == "facts"
    for entry in meta:
        assert (out / "audios" / f"{entry['id']}.wav").stat().st_size > 10_000
        fact_file = (out / "facts" / f"{entry['id']}.txt").read_text()
        assert entry["answer"] in fact_file and entry["knowledge"] == fact_file.strip()
    with pytest.raises(MakeSetError, match="not an empty folder"):
        make_span_set(out, 3)
