"""ITU-R BS.1770-4 integrated loudness of one channel, on numpy alone: what
`pyloudnorm.Meter(rate).integrated_loudness(audio)` (pyloudnorm 0.2, its K-weighting)
measures, and its `normalize.loudness`.

pyloudnorm filters with scipy's `lfilter`, and scipy is some 140 MB of the thin client's
install for two biquads. Here the two K-weighting biquads (RBJ's high shelf, +4 dB above
1.5 kHz, then a 38 Hz high pass, as pyloudnorm designs them for any rate) are one impulse
response, computed once per rate and long enough that what it leaves out is below 1e-13 of
it, applied by FFT convolution from a zero state, as `lfilter` starts (the figures agree
with pyloudnorm's to 1e-6 LU). The gating is
pyloudnorm's: 400 ms blocks every 100 ms, the -70 LUFS absolute gate, then the relative gate
10 LU below the gated mean. tests/audio/test_loudness.py holds it to pyloudnorm's figures
where that package is installed (the dev install).
"""

from __future__ import annotations

import functools
import math

import numpy as np
import numpy.typing as npt

BLOCK_S = 0.4  # the gating block
OVERLAP = 0.75  # blocks start every 100 ms
ABSOLUTE_GATE_LUFS = -70.0
RELATIVE_GATE_LU = 10.0
_OFFSET = -0.691  # BS.1770's constant
_IMPULSE_FLOOR = 1e-13  # what the truncated impulse response leaves out, relative


def _biquad(kind: str, gain_db: float, q: float, fc: float, rate: float
            ) -> tuple[tuple[float, float, float], tuple[float, float, float]]:
    """(b, a) normalised by a0: RBJ's cookbook, as pyloudnorm's IIRfilter writes it."""
    a_ = 10 ** (gain_db / 40.0)
    w0 = 2.0 * math.pi * (fc / rate)
    alpha = math.sin(w0) / (2.0 * q)
    cos = math.cos(w0)
    if kind == "high_shelf":
        root = 2 * math.sqrt(a_) * alpha
        b = (a_ * ((a_ + 1) + (a_ - 1) * cos + root), -2 * a_ * ((a_ - 1) + (a_ + 1) * cos),
             a_ * ((a_ + 1) + (a_ - 1) * cos - root))
        a = ((a_ + 1) - (a_ - 1) * cos + root, 2 * ((a_ - 1) - (a_ + 1) * cos),
             (a_ + 1) - (a_ - 1) * cos - root)
    else:  # high pass
        b = ((1 + cos) / 2, -(1 + cos), (1 + cos) / 2)
        a = (1 + alpha, -2 * cos, 1 - alpha)
    return (b[0] / a[0], b[1] / a[0], b[2] / a[0]), (1.0, a[1] / a[0], a[2] / a[0])


def _k_weighting(rate: float) -> list[tuple[tuple[float, float, float],
                                            tuple[float, float, float]]]:
    return [_biquad("high_shelf", 4.0, 1 / math.sqrt(2), 1500.0, rate),
            _biquad("high_pass", 0.0, 0.5, 38.0, rate)]


@functools.lru_cache(maxsize=8)
def _impulse_response(rate: float) -> npt.NDArray[np.float64]:
    """The K-weighting's impulse response (both stages), cut where the rest of it is below
    _IMPULSE_FLOOR of its peak (the 38 Hz high pass rings longest: ~0.15 s at 24 kHz)."""
    length = max(64, int(rate))  # a second: far longer than either stage rings
    h = np.zeros(length)
    h[0] = 1.0
    for (b0, b1, b2), (_, a1, a2) in _k_weighting(rate):
        out = np.zeros(length)
        x1 = x2 = y1 = y2 = 0.0
        for n in range(length):  # once per rate: the direct form's recursion
            x0 = h[n]
            y0 = b0 * x0 + b1 * x1 + b2 * x2 - a1 * y1 - a2 * y2
            out[n] = y0
            x2, x1, y2, y1 = x1, x0, y1, y0
        h = out
    tail = np.abs(h[::-1]).cumsum()[::-1]  # what is left from each sample on
    keep = int(np.argmax(tail < _IMPULSE_FLOOR * np.abs(h).max())) or length
    return h[:keep]


def _fft_size(at_least: int) -> int:
    """The smallest 2^a 3^b 5^c >= at_least: sizes the FFT computes fastest."""
    best = 1 << (at_least - 1).bit_length()
    power5 = 1
    while power5 < best:
        power35 = power5
        while power35 < best:
            size = power35
            while size < at_least:
                size *= 2
            best = min(best, size)
            power35 *= 3
        power5 *= 5
    return best


@functools.lru_cache(maxsize=16)
def _response_spectrum(rate: float, size: int) -> npt.NDArray[np.complex128]:
    return np.fft.rfft(_impulse_response(rate), size)


def _filtered(audio: npt.NDArray[np.floating], rate: float) -> npt.NDArray[np.float64]:
    """K-weighted from a zero state, as `lfilter` filters (in float64 throughout, where
    pyloudnorm rounds each stage's output to the input's dtype: 1e-7 dB apart)."""
    n = audio.shape[0]
    size = _fft_size(n + _impulse_response(rate).shape[0] - 1)
    spectrum = np.fft.rfft(audio.astype(np.float64), size) * _response_spectrum(rate, size)
    return np.fft.irfft(spectrum, size)[:n]


def integrated_loudness(audio: npt.NDArray[np.floating], rate: float) -> float:
    """LUFS of one channel (float samples): -inf when no block is above the absolute gate.
    ValueError for audio shorter than one 400 ms block, as pyloudnorm."""
    data = np.asarray(audio)
    if data.ndim != 1 or not np.issubdtype(data.dtype, np.floating):
        raise ValueError("the meter takes one channel of float samples")
    if data.shape[0] < BLOCK_S * rate:
        raise ValueError("Audio must have length greater than the block size.")
    squares = np.square(_filtered(data, rate))
    sums = np.concatenate([[0.0], np.cumsum(squares)])
    step = 1.0 - OVERLAP
    seconds = data.shape[0] / rate
    blocks = int(np.round((seconds - BLOCK_S) / (BLOCK_S * step))) + 1
    j = np.arange(blocks)
    lower = (BLOCK_S * (j * step) * rate).astype(np.int64)
    upper = np.minimum((BLOCK_S * (j * step + 1) * rate).astype(np.int64), data.shape[0])
    power = (sums[upper] - sums[np.minimum(lower, upper)]) / (BLOCK_S * rate)  # [blocks]
    with np.errstate(divide="ignore"):
        block_lufs = _OFFSET + 10.0 * np.log10(power)
    above = block_lufs >= ABSOLUTE_GATE_LUFS
    if not above.any():
        return float("-inf")
    relative = _OFFSET + 10.0 * math.log10(power[above].mean()) - RELATIVE_GATE_LU
    kept = (block_lufs > relative) & (block_lufs > ABSOLUTE_GATE_LUFS)
    if not kept.any():
        return float("-inf")
    return float(_OFFSET + 10.0 * math.log10(power[kept].mean()))


def normalized(audio: npt.NDArray[np.floating], measured_lufs: float, target_lufs: float
               ) -> npt.NDArray[np.float64]:
    """`audio` at `target_lufs`, given its loudness (pyloudnorm.normalize.loudness)."""
    return np.power(10.0, (target_lufs - measured_lufs) / 20.0) * np.asarray(audio)
