"""A playback jitter buffer between the engine (80 ms frames) and the output callback.

The engine hands over a frame every ~80 ms, with jitter; the sound card asks for a few
milliseconds at a time on a strict clock. The buffer absorbs the difference:

- It is a preallocated ring of float32 samples, so neither side allocates per call.
- The consumer (the output callback) never waits: when the ring runs dry it plays silence for
  the missing samples and counts one underrun. It then waits until `target` samples are
  queued again before it resumes (priming), so one late frame does not turn into a stutter of
  tiny gaps.
- When the producer writes more than fits, the oldest samples are dropped and one overrun is
  counted: latency stays bounded by `capacity` instead of growing with clock drift.

One lock guards the indices. It is held only for a copy of at most one frame, never across a
wait, so the output callback is never blocked for longer than a memcpy.
"""

from __future__ import annotations

import threading

import numpy as np

from app.frames import FRAME_SAMPLES


class JitterBuffer:
    """Single-producer / single-consumer ring of float32 samples (safe for more, too)."""

    def __init__(self, capacity: int = 8 * FRAME_SAMPLES, target: int = 2 * FRAME_SAMPLES) -> None:
        if capacity <= 0 or not 0 <= target <= capacity:
            raise ValueError(f"need 0 <= target <= capacity, got {target=} {capacity=}")
        self.capacity = capacity
        self.target = target
        self._ring = np.zeros(capacity, dtype=np.float32)  # [capacity]
        self._read = 0  # absolute sample counts; position in the ring is count % capacity
        self._write = 0
        self._primed = target == 0
        self._lock = threading.Lock()
        self.underruns = 0
        self.overruns = 0
        self.dropped_samples = 0  # samples lost to overruns

    @property
    def fill(self) -> int:
        """Samples queued now."""
        return self._write - self._read

    def clear(self) -> None:
        with self._lock:
            self._read = self._write = 0
            self._primed = self.target == 0

    def discard(self, n: int) -> int:
        """Drop up to n of the oldest samples (not counted as an overrun). Returns how many."""
        with self._lock:
            n = max(0, min(n, self._write - self._read))
            self._read += n
        return n

    def write(self, samples: np.ndarray) -> int:
        """Queue samples (any length; float32 1-D). Returns the number of samples dropped."""
        samples = np.asarray(samples, dtype=np.float32).reshape(-1)  # [n]
        n = samples.shape[0]
        if n > self.capacity:  # keep only what can ever be played
            samples = samples[n - self.capacity :]
        with self._lock:
            dropped = n - samples.shape[0]
            over = self._write - self._read + samples.shape[0] - self.capacity
            if over > 0:
                self._read += over
                dropped += over
            if dropped:
                self.overruns += 1
                self.dropped_samples += dropped
            self._copy_in(samples)
            if not self._primed and self._write - self._read >= self.target:
                self._primed = True
        return dropped

    def read_into(self, out: np.ndarray) -> int:
        """Fill `out` (1-D float32 view, e.g. the output callback's buffer) without waiting.

        Returns how many samples were real audio; the rest of `out` is zeroed.
        """
        want = out.shape[0]
        with self._lock:
            available = self._write - self._read
            if not self._primed:
                got = 0
            else:
                got = min(want, available)
                if got < want:
                    self.underruns += 1
                    self._primed = self.target == 0
                self._copy_out(out, got)
        if got < want:
            out[got:] = 0.0
        return got

    # ---- under the lock ------------------------------------------------------------------

    def _copy_in(self, samples: np.ndarray) -> None:
        n = samples.shape[0]
        start = self._write % self.capacity
        first = min(n, self.capacity - start)
        self._ring[start : start + first] = samples[:first]
        if first < n:
            self._ring[: n - first] = samples[first:]
        self._write += n

    def _copy_out(self, out: np.ndarray, n: int) -> None:
        start = self._read % self.capacity
        first = min(n, self.capacity - start)
        out[:first] = self._ring[start : start + first]
        if first < n:
            out[first:n] = self._ring[: n - first]
        self._read += n
