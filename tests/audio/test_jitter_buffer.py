import numpy as np

from app.audio.jitter_buffer import JitterBuffer


def test_order_is_preserved_across_the_ring_edge() -> None:
    buffer = JitterBuffer(capacity=10, target=0)
    out = np.zeros(4, dtype=np.float32)
    played = []
    for start in range(0, 40, 4):
        buffer.write(np.arange(start, start + 4, dtype=np.float32))
        assert buffer.read_into(out) == 4
        played.extend(out.tolist())
    assert played == list(range(40))
    assert buffer.underruns == buffer.overruns == 0


def test_underrun_plays_silence_counts_once_and_waits_for_the_target() -> None:
    buffer = JitterBuffer(capacity=16, target=4)
    out = np.ones(3, dtype=np.float32)
    assert buffer.read_into(out) == 0 and not out.any()  # still priming: not an underrun
    assert buffer.underruns == 0
    buffer.write(np.arange(1, 6, dtype=np.float32))  # 5 >= target: playing
    assert buffer.read_into(out) == 3 and out.tolist() == [1, 2, 3]
    assert buffer.read_into(out) == 2 and out.tolist() == [4, 5, 0]
    assert buffer.underruns == 1
    buffer.write(np.array([6, 7], dtype=np.float32))  # below target again: keep priming
    assert buffer.read_into(out) == 0
    assert buffer.underruns == 1
    buffer.write(np.array([8, 9], dtype=np.float32))
    assert buffer.read_into(out) == 3 and out.tolist() == [6, 7, 8]


def test_overrun_drops_the_oldest_and_counts() -> None:
    buffer = JitterBuffer(capacity=6, target=0)
    buffer.write(np.arange(4, dtype=np.float32))
    assert buffer.write(np.arange(4, 8, dtype=np.float32)) == 2
    assert buffer.overruns == 1 and buffer.dropped_samples == 2 and buffer.fill == 6
    out = np.zeros(6, dtype=np.float32)
    buffer.read_into(out)
    assert out.tolist() == [2, 3, 4, 5, 6, 7]


def test_discard_drops_oldest_without_counting() -> None:
    buffer = JitterBuffer(capacity=8, target=0)
    buffer.write(np.arange(6, dtype=np.float32))
    assert buffer.discard(4) == 4 and buffer.overruns == 0
    out = np.zeros(2, dtype=np.float32)
    buffer.read_into(out)
    assert out.tolist() == [4, 5]
