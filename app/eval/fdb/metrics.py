"""Full-Duplex-Bench v1's metrics, from word timestamps and voice-activity segments.

Our own code, after the definitions in the benchmark's scoring scripts
(`v1_v1.5/evaluation/eval_*.py`), which the paper's numbers come from:

- **TOR** (take-over rate) is the share of samples where the model takes the turn. It takes
  the turn when it says any word, unless what it says is shorter than 1 s (first word's
  start to last word's end) *and* at most 3 words: that is a backchannel, not a turn. Every
  word the ASR gives counts, fillers and punctuation included; no words is no turn.
- **Latency** (turn-taking, interruption) is from the end of the user's turn to the start of
  the reply's first word, only for samples where the model took the turn; a reply that
  started before the user finished counts 0 (clipped), never negative.
- **Interruption**: only what the model says after the interruption ends counts (the
  benchmark transcribes the reply cropped there). A word still sounding at that moment
  counts from that moment: latency 0.
- **Backchannel** works on voice-activity segments of the reply. A segment over 3 s is a
  turn and ends the look; a shorter one is judged by the words that overlap it: more than 3,
  a turn; under 1 s with at most 2, a backchannel; else a turn. As in the benchmark's script
  the sample's verdict is that of the last segment looked at (a turn early on is forgotten
  if a backchannel follows it), and every segment up to a long one counts for the frequency
  (backchannels per second of reply) and the timing histogram compared with the human one
  (JSD: Jensen-Shannon distance, natural log, 0.2 s bins; 1 when there is no segment).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

SHORT_TURN_S = 1.0  # a reply shorter than this ...
SHORT_TURN_WORDS = 3  # ... of at most this many words is a backchannel, not a turn
BACKCHANNEL_LONGEST_S = 3.0  # a voiced segment longer than this is a turn
BACKCHANNEL_MOST_WORDS = 3  # a shorter segment with more words is a turn
BACKCHANNEL_SHORT_WORDS = 2  # a segment under SHORT_TURN_S with at most this many is not
JSD_BIN_S = 0.2
JSD_EPSILON = 1e-10


@dataclass(frozen=True)
class Word:
    text: str
    start_s: float
    end_s: float


@dataclass(frozen=True)
class Segment:
    start_s: float
    end_s: float

    @property
    def seconds(self) -> float:
        return self.end_s - self.start_s


@dataclass(frozen=True)
class TurnVerdict:
    took_turn: bool
    latency_s: float | None  # None when the model did not take the turn (or no reference)
    words: int
    speech_s: float  # first word's start to last word's end; 0 without words


@dataclass(frozen=True)
class BackchannelVerdict:
    took_turn: bool
    backchannels: tuple[Segment, ...]
    frequency: float  # backchannels per second of the reply
    jsd: float | None  # None without the human timing distribution


def _ordered(words: Iterable[Word]) -> list[Word]:
    return sorted((w for w in words if w.text.strip()), key=lambda w: (w.start_s, w.end_s))


def _verdict(words: Sequence[Word], user_end_s: float | None) -> TurnVerdict:
    if not words:
        return TurnVerdict(False, None, 0, 0.0)
    speech = words[-1].end_s - words[0].start_s
    took = not (speech < SHORT_TURN_S and len(words) <= SHORT_TURN_WORDS)
    latency = None
    if took and user_end_s is not None:
        latency = max(0.0, words[0].start_s - user_end_s)
    return TurnVerdict(took, latency, len(words), speech)


def pause_handling(words: Iterable[Word]) -> TurnVerdict:
    """Did the model take the turn during the user's pause? (lower TOR is better)"""
    return _verdict(_ordered(words), None)


def smooth_turn_taking(words: Iterable[Word], user_end_s: float) -> TurnVerdict:
    """Did the model take the turn when the user finished, and how soon?"""
    return _verdict(_ordered(words), user_end_s)


def user_interruption(words: Iterable[Word], interruption_end_s: float) -> TurnVerdict:
    """Did the model answer the interruption, and how soon after it ended?"""
    after = [Word(w.text, max(w.start_s, interruption_end_s), w.end_s)
             for w in _ordered(words) if w.end_s > interruption_end_s]
    return _verdict(_ordered(after), interruption_end_s)


def _overlapping(words: Sequence[Word], segment: Segment) -> list[Word]:
    """Words inside the segment or crossing either of its ends (the benchmark's rule)."""
    s, e = segment.start_s, segment.end_s
    return [w for w in words
            if (s <= w.start_s and w.end_s <= e) or (w.start_s <= e < w.end_s)
            or (w.start_s <= s < w.end_s)]


def backchannel(segments: Iterable[Segment], words: Iterable[Word], reply_s: float,
                human: Sequence[float] | None = None) -> BackchannelVerdict:
    """The reply while the user speaks and pauses: backchannels, or a taken turn?

    `human` is the benchmark's timing distribution for this sample (icc_gt_distribution.json)."""
    ordered = _ordered(words)
    took = False
    kept: list[Segment] = []
    for segment in sorted(segments, key=lambda g: g.start_s):
        if segment.seconds > BACKCHANNEL_LONGEST_S:
            took = True
            break
        count = len(_overlapping(ordered, segment))
        if count > BACKCHANNEL_MOST_WORDS:
            took = True
        elif segment.seconds < SHORT_TURN_S:
            took = count > BACKCHANNEL_SHORT_WORDS
        else:
            took = True
        kept.append(segment)
    frequency = len(kept) / reply_s if reply_s > 0 else 0.0
    jsd = None
    if human is not None:
        jsd = 1.0 if not kept else js_distance(timing_histogram(kept, reply_s),
                                               resized(human, _bins(reply_s)))
    return BackchannelVerdict(took, tuple(kept), frequency, jsd)


def _bins(reply_s: float) -> int:
    return int(reply_s / JSD_BIN_S) + 1


def timing_histogram(segments: Sequence[Segment], reply_s: float) -> np.ndarray:
    """How many segments cover each 0.2 s bin (both end bins included), as a distribution."""
    counts: npt.NDArray[np.float64] = np.zeros(_bins(reply_s))
    for segment in segments:
        first, last = int(segment.start_s / JSD_BIN_S), int(segment.end_s / JSD_BIN_S)
        counts[first : min(last, len(counts) - 1) + 1] += 1
    counts = counts + JSD_EPSILON
    return counts / counts.sum()


def resized(values: Sequence[float], length: int) -> np.ndarray:
    """`values` stretched over `length` points by linear interpolation (same span 0..1)."""
    points = np.asarray(values, dtype=float)
    if len(points) == 1:
        return np.full(length, points[0])
    return np.interp(np.linspace(0, 1, length), np.linspace(0, 1, len(points)), points)


def js_distance(p: np.ndarray, q: np.ndarray) -> float:
    """Jensen-Shannon distance (the square root of the divergence), natural log; both inputs
    are normalised to sum 1 first."""
    p = np.asarray(p, dtype=float) / np.sum(p)
    q = np.asarray(q, dtype=float) / np.sum(q)
    m = (p + q) / 2

    def kl(a: np.ndarray) -> float:
        mask = a > 0
        return float(np.sum(a[mask] * np.log(a[mask] / m[mask])))

    return math.sqrt(max(0.0, (kl(p) + kl(q)) / 2))


def mean(values: Iterable[float | None]) -> float | None:
    """The mean of the values that are not None; None when there are none."""
    kept = [float(v) for v in values if v is not None]
    return sum(kept) / len(kept) if kept else None
