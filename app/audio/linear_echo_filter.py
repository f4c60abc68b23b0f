"""The echo path as a linear filter, subtracted before WebRTC AEC3 sees the microphone.

Why it exists: AEC3's suppressor does not trust its own linear filter. Its residual-echo
estimate assumes the filter removed at most 6 dB of echo below 8 kHz (`Erle::max_l = 4`, 1.8 dB
above it), whatever it really removed, and it attenuates every band where that estimate is
near the captured power. So while the model talks, a user quieter than the echo is
suppressed with it: `bench echo` measured 15 % of their speech energy kept in the simulated
room, 34 % on the digital loopback, where the linear filter itself removes everything. livekit's
binding exposes no AEC3 tuning (four on/off switches), so the echo AEC3 is shown is made
quieter instead: with this filter taking 20-25 dB off first, AEC3's estimate of what is left
sits far below the user and its suppressor lets them through, and it still removes what
this filter leaves (the measured ERLE stays above 30 dB).

What keeps the user's voice intact here: the output is the microphone minus a filtered copy
of what was played, nothing else; no gain is ever applied to the microphone. A filter that
adapted to the user (double talk) would add echo-like noise, not remove speech, and two
filters guard against that: a background filter adapts on every block, the foreground one
(whose estimate is subtracted) is replaced by it only when it cancels clearly better, the
background restarts from the foreground when it diverges, and a foreground that adds more
than it removes (the echo path moved: a device restarted, the far end re-aligned) is dropped.

The filter: partitioned-block frequency-domain NLMS (overlap-save), 10 ms blocks, 20 blocks
(200 ms: the device latency plus the room's reverberation). Shapes: K = BLOCK + 1 bins.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from app.frames import SAMPLE_RATE


@dataclass(frozen=True)
class LinearEchoSettings:
    span_ms: int = 200  # echo path modelled: device latency + room reverberation; 0: off
    block_samples: int = SAMPLE_RATE // 100  # 240: AEC3's 10 ms chunk
    step: float = 0.5  # NLMS step of the background filter (above ~0.6 it goes unstable)
    far_floor: float = 1e-3  # far-end RMS (-60 dBFS) below which it hardly adapts
    copy_ratio: float = 0.5  # background replaces foreground at 3 dB less error
    restart_ratio: float = 4.0  # background restarts from foreground at 6 dB more error

    @property
    def partitions(self) -> int:
        return self.span_ms * SAMPLE_RATE // 1000 // self.block_samples


class LinearEchoFilter:
    """Two-path partitioned-block frequency-domain NLMS; `process_block` takes one block of
    the microphone and of what was played at the same time, returns the microphone minus the
    echo estimate. Not thread-safe (the capture thread alone calls it)."""

    def __init__(self, settings: LinearEchoSettings = LinearEchoSettings()) -> None:
        self.settings = settings
        block, parts = settings.block_samples, settings.partitions
        bins = block + 1
        self._far = np.zeros((parts, bins), dtype=np.complex128)  # [P, K] newest first
        self._background = np.zeros((parts, bins), dtype=np.complex128)  # [P, K]
        self._foreground = np.zeros((parts, bins), dtype=np.complex128)  # [P, K]
        self._window = np.zeros(2 * block)  # [2B] previous far block, then this one
        self._padded_error = np.zeros(2 * block)  # [2B] zeros, then this block's error
        self._far_power = np.zeros(bins)  # [K] smoothed, summed over partitions
        self._regularizer = parts * 2 * block * settings.far_floor**2
        self._background_error = 0.0  # smoothed block energies
        self._foreground_error = 0.0
        self._near_energy = 0.0  # smoothed over ~200 ms, like _foreground_slow
        self._foreground_slow = 0.0

    def process_block(self, near: np.ndarray, far: np.ndarray) -> np.ndarray:
        """near, far: [B] float; returns [B] float64, the microphone less the echo."""
        block = self.settings.block_samples
        self._window[:block] = self._window[block:]
        self._window[block:] = far
        self._far[1:] = self._far[:-1]  # one block older (numpy copies overlapping slices)
        self._far[0] = np.fft.rfft(self._window)
        background = near - np.fft.irfft((self._far * self._background).sum(0))[block:]
        foreground = near - np.fft.irfft((self._far * self._foreground).sum(0))[block:]
        self._adapt(background)
        self._near_energy = 0.95 * self._near_energy + 0.05 * float(near @ near)
        self._foreground_slow = 0.95 * self._foreground_slow + 0.05 * float(
            foreground @ foreground)
        self._background_error = 0.8 * self._background_error + 0.2 * float(
            background @ background)
        self._foreground_error = 0.8 * self._foreground_error + 0.2 * float(
            foreground @ foreground)
        if self._foreground_slow > 2.0 * self._near_energy:  # the echo path moved under it:
            self._foreground[:] = 0.0  # a stale estimate adds echo instead of removing it
            self._foreground_error = self._foreground_slow = self._near_energy
            foreground = near
        if self._background_error < self.settings.copy_ratio * self._foreground_error:
            self._foreground[:] = self._background
            self._foreground_error = self._background_error
            return background
        if self._background_error > self.settings.restart_ratio * self._foreground_error:
            self._background[:] = self._foreground  # diverged (double talk): start again
            self._background_error = self._foreground_error
        return foreground

    def _adapt(self, error: np.ndarray) -> None:
        """One constrained NLMS step of the background filter, normalised per bin by the far
        end's power over the whole span (speech is coloured: a per-bin step whitens it)."""
        block = self.settings.block_samples
        power = np.square(np.abs(self._far)).sum(0)  # [K]
        self._far_power = 0.7 * self._far_power + 0.3 * power
        self._padded_error[block:] = error
        spectrum = np.fft.rfft(self._padded_error)  # [K]
        norm = self._far_power + 1e-3 * float(self._far_power.mean()) + self._regularizer
        gradient = np.fft.irfft(np.conj(self._far) * (self.settings.step * spectrum / norm),
                                axis=1)  # [P, 2B]
        gradient[:, block:] = 0.0  # each partition stays a causal B-tap filter
        self._background += np.fft.rfft(gradient, axis=1)
