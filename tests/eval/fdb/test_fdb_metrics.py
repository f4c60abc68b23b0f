"""Full-Duplex-Bench v1 metrics on hand-built word and segment logs with known answers."""

from __future__ import annotations

import math

import pytest

from app.eval.fdb import metrics
from app.eval.fdb.layout import Kind
from app.eval.fdb.metrics import Segment, Word
from app.eval.fdb.score import summarise


def words(*spans: tuple[float, float]) -> list[Word]:
    return [Word(f"w{i}", start, end) for i, (start, end) in enumerate(spans)]


def test_no_words_is_no_turn_and_no_latency():
    for verdict in (metrics.pause_handling([]), metrics.smooth_turn_taking([], 2.0),
                    metrics.user_interruption([], 2.0),
                    metrics.pause_handling([Word("  ", 1.0, 2.0)])):  # an empty word
        assert verdict.took_turn is False and verdict.latency_s is None and verdict.words == 0


def test_under_one_second_and_at_most_three_words_is_a_backchannel_not_a_turn():
    three_short = words((5.0, 5.3), (5.3, 5.6), (5.6, 5.95))
    assert metrics.pause_handling(three_short).took_turn is False
    four_short = three_short + words((5.95, 5.99))
    assert metrics.pause_handling(four_short).took_turn is True
    one_long = words((5.0, 6.0))  # exactly 1 s: not shorter than 1 s, so a turn
    assert metrics.pause_handling(one_long).took_turn is True
    # The span is first start to last end, whatever the order the words come in.
    spread = [Word("b", 7.2, 7.4), Word("a", 6.0, 6.2)]
    assert metrics.pause_handling(spread).took_turn is True
    verdict = metrics.smooth_turn_taking(three_short, user_end_s=4.0)
    assert verdict.took_turn is False and verdict.latency_s is None


def test_latency_runs_from_the_users_end_and_is_clipped_at_zero():
    reply = words((4.25, 4.6), (4.6, 5.0), (5.0, 5.5))
    assert metrics.smooth_turn_taking(reply, user_end_s=4.0).latency_s == pytest.approx(0.25)
    early = words((3.5, 4.2), (4.2, 5.0))  # started before the user finished
    assert metrics.smooth_turn_taking(early, user_end_s=4.0).latency_s == 0.0


def test_only_speech_after_the_interruption_counts_and_overlap_starts_at_its_end():
    end = 10.0
    before = words((8.0, 9.0), (9.0, 9.9), (9.9, 10.0))  # all over by the end: no turn
    assert metrics.user_interruption(before, end).took_turn is False
    # A word still sounding when the interruption ends counts from that moment.
    overlapping = words((9.5, 10.4), (10.4, 10.8), (10.8, 11.3))
    verdict = metrics.user_interruption(overlapping, end)
    assert verdict.took_turn is True and verdict.latency_s == 0.0
    assert verdict.words == 3 and verdict.speech_s == pytest.approx(1.3)
    # Counted from the end, the same three words are under 1 s: not a turn.
    short = words((9.0, 10.3), (10.3, 10.6), (10.6, 10.9))
    assert metrics.user_interruption(short, end).took_turn is False
    later = words((8.0, 9.0), (10.6, 11.0), (11.0, 11.9))
    late = metrics.user_interruption(later, end)
    assert late.took_turn is True and late.latency_s == pytest.approx(0.6) and late.words == 2


def test_backchannel_segments_short_few_words_long_and_the_last_one_decides():
    talk = words((1.0, 1.2), (2.0, 2.3), (2.3, 2.5), (2.5, 2.7), (2.7, 2.9))
    nod = Segment(0.9, 1.4)  # 1 word, 0.5 s: a backchannel
    chatter = Segment(1.9, 3.0)  # 4 words: a turn
    result = metrics.backchannel([nod], talk, reply_s=10.0)
    assert result.took_turn is False and result.backchannels == (nod,)
    assert result.frequency == pytest.approx(0.1) and result.jsd is None
    assert metrics.backchannel([nod, chatter], talk, 10.0).took_turn is True
    # As the benchmark's script: a later backchannel overrides an earlier turn.
    later_nod = Segment(5.0, 5.5)
    assert metrics.backchannel([chatter, later_nod], talk, 10.0).took_turn is False
    # Under 1 s but three words: a turn; at least 1 s with one word: a turn.
    three = words((6.0, 6.2), (6.2, 6.4), (6.4, 6.6))
    assert metrics.backchannel([Segment(6.0, 6.7)], three, 10.0).took_turn is True
    assert metrics.backchannel([Segment(0.5, 1.6)], talk, 10.0).took_turn is True
    # A segment over 3 s is a turn and ends the count: later segments are not looked at.
    long = Segment(3.5, 6.8)
    result = metrics.backchannel([nod, long, later_nod], talk, 10.0)
    assert result.took_turn is True and result.backchannels == (nod,)
    assert metrics.backchannel([], talk, 10.0).took_turn is False


def test_backchannel_words_are_those_inside_or_crossing_the_segment():
    segment = Segment(2.0, 2.8)
    crossing = [Word("in", 2.1, 2.3), Word("start", 1.8, 2.05), Word("end", 2.7, 3.0),
                Word("out", 3.1, 3.2)]
    assert [w.text for w in metrics._overlapping(crossing, segment)] == ["in", "start", "end"]
    assert metrics.backchannel([segment], crossing, 10.0).took_turn is True  # 3 words
    assert metrics.backchannel([segment], crossing[:2] + crossing[3:], 10.0).took_turn is False


def test_jsd_compares_the_timing_of_backchannels_with_the_human_one():
    assert metrics.js_distance([1.0, 0.0], [0.0, 1.0]) == pytest.approx(math.sqrt(math.log(2)))
    assert metrics.js_distance([1.0, 3.0], [2.0, 6.0]) == pytest.approx(0.0, abs=1e-7)
    histogram = metrics.timing_histogram([Segment(0.0, 0.25), Segment(0.3, 0.35)], 0.59)
    assert histogram == pytest.approx([1 / 3, 2 / 3, 0.0], abs=1e-8)
    human = [1.0, 0.0]  # stretched over the reply's three bins: [1, 0.5, 0]
    result = metrics.backchannel([Segment(0.0, 0.1)], [], 0.59, human)
    expected = metrics.js_distance([1.0, 0.0, 0.0], [1.0, 0.5, 0.0])
    assert result.jsd == pytest.approx(expected, abs=1e-6) and 0.0 < result.jsd < 1.0
    assert metrics.backchannel([], [], 0.59, human).jsd == 1.0  # no backchannel at all


def record(took: bool, latency: float | None = None, **extra) -> dict:
    return {"took_turn": took, "latency_s": latency, **extra}


def test_task_averages_count_latency_and_rating_only_where_they_apply():
    turns = [record(True, 0.2), record(True, 0.4), record(False), record(False)]
    summary = summarise(Kind.SMOOTH_TURN_TAKING, turns)
    assert summary == {"tor": 0.5, "latency_s": pytest.approx(0.3)}
    assert summarise(Kind.PAUSE_HANDLING, turns) == {"tor": 0.5}
    rated = [record(True, 0.5, rating=4), record(True, 1.5, rating=None), record(False)]
    summary = summarise(Kind.USER_INTERRUPTION, rated)
    assert summary["rating"] == 4 and summary["rated"] == 1 and summary["unrated"] == 1
    assert summary["latency_s"] == pytest.approx(1.0) and summary["tor"] == pytest.approx(2 / 3)
    nothing = summarise(Kind.SMOOTH_TURN_TAKING, [record(False)])
    assert nothing == {"tor": 0.0, "latency_s": None}
