"""The replay clock alone (app/orchestrator/replay_clock.py): where a file's run may feed while
an LLM request is in flight, and the frame its answer lands at — from the declared latency
when the server scripted one, whatever the machine's clock says, and from the measured one
otherwise."""

from __future__ import annotations

import threading

from app.orchestrator.messages import TurnAnswer
from app.orchestrator.replay_clock import ReplayClock, frames_of_latency


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_request_holds_the_feeder_at_its_frame_until_the_answer_is_back():
    time = FakeClock()
    clock = ReplayClock(time)
    assert clock.limit() is None and clock.wait_until_feedable(500, 0.0)
    clock.hold(turn_id=1, asked_frame=60)
    time.now += 5.0  # a busy machine: the wall clock runs on, the conversation does not
    assert clock.limit() == 60
    assert clock.wait_until_feedable(60, 0.0) and not clock.wait_until_feedable(61, 0.0)
    assert clock.answered(1, declared_s=0.41) == 66  # ceil(0.41 / 0.08) = 6 frames later
    assert clock.limit() == 65  # up to the frame before it lands
    clock.release(1)
    assert clock.limit() is None


def test_the_declared_latency_wins_over_the_wall_clock_and_a_real_llm_is_measured():
    time = FakeClock()
    clock = ReplayClock(time)
    clock.hold(1, 10)
    clock.hold(2, 10)
    time.now += 3.0  # the requests took 3 s of the machine's time
    assert clock.answered(1, declared_s=0.41) == 16
    assert clock.answered(2, declared_s=None) == 10 + 38  # 3 s / 80 ms, rounded up
    assert clock.limit() == 15  # the earliest answer holds the feeder
    assert clock.answered(3, declared_s=0.1) is None  # no hold: not a replayed request


def test_an_answer_is_settled_at_the_barrier_before_its_frame():
    clock = ReplayClock(FakeClock())
    early = TurnAnswer(1, "a", (), None, arrival_frame=5)
    late = TurnAnswer(2, "b", (), None, arrival_frame=9)
    assert not clock.defer(TurnAnswer(3, "c", (), None))  # no frame: settled at once
    assert clock.defer(late) and clock.defer(early)
    assert clock.due(newest_frame=3) == []
    assert clock.due(newest_frame=4) == [early]  # the barrier before frame 5
    assert clock.due(newest_frame=7) == []
    assert clock.due(newest_frame=8) == [late]
    assert not clock.defer(TurnAnswer(4, "d", (), None, arrival_frame=9))  # reached already


def test_stop_lets_a_waiting_feeder_go():
    clock = ReplayClock()
    clock.hold(1, 0)
    fed: list[bool] = []
    feeder = threading.Thread(target=lambda: fed.append(clock.wait_until_feedable(5, 30.0)))
    feeder.start()
    clock.stop()
    feeder.join(10.0)
    assert fed == [True]


def test_an_answer_takes_at_least_one_frame_and_a_boundary_is_not_a_frame_more():
    assert frames_of_latency(0.0) == 1
    assert frames_of_latency(0.08) == 1
    assert frames_of_latency(0.081) == 2
    assert frames_of_latency(1.21) == 16
