"""A stationary spectral noise gate on numpy alone: what `noisereduce.reduce_noise(y, sr,
stationary=True, ...)` (noisereduce 3.0) computes, step for step, without its packages.

noisereduce needs scipy (its STFT and a 2-D convolution) and declares matplotlib (for plots
the leveller never draws): some 250 MB of the thin client's install for one gate. The steps
are few and written here once; tests/audio/test_spectral_gate.py holds them to noisereduce's
output where that package is installed (the dev install):

1. The noise profile, from the signal itself (`y_noise` None): its STFT in dB (an 80 dB
   floor below each frequency's loudest frame), per frequency the mean plus 1.5 standard
   deviations over time is the threshold.
2. The signal, with `padding` zeros each side, through the same STFT; a bin above its
   frequency's threshold keeps all of it, one below keeps `1 - prop_decrease`.
3. That mask smoothed over 500 Hz and 50 ms (a triangular kernel, the two ways at once),
   applied, and the STFT inverted (overlap-add, window-squared normalisation).

The STFT is scipy's `stft` as noisereduce calls it: a periodic Hann window of `n_fft`, a
hop of a quarter of it, `n_fft / 2` zeros at each end, `spectrum` scaling; the noise's in the
signal's precision (float32 in, float32 FFT), the padded signal's in float64.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

N_STD_THRESHOLD = 1.5  # noisereduce's n_std_thresh_stationary
TOP_DB = 80.0  # the floor below each frequency's loudest frame, in dB
FREQ_SMOOTH_HZ = 500.0  # noisereduce's freq_mask_smooth_hz
TIME_SMOOTH_MS = 50.0  # noisereduce's time_mask_smooth_ms
DEFAULT_PADDING = 30000  # noisereduce's zeros each side of its chunk


def _hann(n: int) -> npt.NDArray[np.float64]:
    """The periodic Hann window (scipy's get_window("hann", n), for spectral analysis)."""
    return 0.5 - 0.5 * np.cos(2.0 * np.pi * np.arange(n) / n)


def _stft(x: npt.NDArray[np.floating], n_fft: int, hop: int) -> npt.NDArray[np.complexfloating]:
    """[freq, frames]: scipy.signal.stft(x, nperseg=n_fft, noverlap=n_fft - hop,
    boundary="zeros", padded=False), computed in x's precision as scipy does."""
    window = _hann(n_fft).astype(x.dtype)
    half = n_fft // 2
    extended = np.concatenate([np.zeros(half, x.dtype), x, np.zeros(half, x.dtype)])
    frames = np.lib.stride_tricks.sliding_window_view(extended, n_fft)[::hop]  # [T, n_fft]
    spectrum = np.fft.rfft(frames * window, n=n_fft, axis=-1)
    spectrum *= 1.0 / window.sum()
    return spectrum.T


def _overlap_add(frames: npt.NDArray[np.float64], hop: int) -> npt.NDArray[np.float64]:
    """[n, T] frames, each `hop` after the last, summed into one signal."""
    n, count = frames.shape
    if n % hop:  # the general case, a frame at a time
        out = np.zeros(n + (count - 1) * hop)
        for i in range(count):
            out[i * hop:i * hop + n] += frames[:, i]
        return out
    parts = n // hop  # each frame is `parts` blocks of `hop`: one sum per block
    blocks = frames.T.reshape(count, parts, hop)
    summed = np.zeros((count + parts - 1, hop))
    for j in range(parts):
        summed[j:j + count] += blocks[:, j]
    return summed.reshape(-1)


def _istft(spectrum: npt.NDArray[np.complexfloating], n_fft: int, hop: int
           ) -> npt.NDArray[np.float64]:
    """The inverse of `_stft` (scipy.signal.istft with boundary=True): overlap-add of the
    windowed frames, divided by the windows' squares where they are not ~0."""
    window = _hann(n_fft)
    frames = np.fft.irfft(spectrum, n=n_fft, axis=0)[:n_fft] * window.sum()  # [n_fft, T]
    out = _overlap_add(frames * window[:, None], hop)
    norm = _overlap_add(np.repeat((window ** 2)[:, None], frames.shape[1], axis=1), hop)
    half = n_fft // 2
    out, norm = out[half:-half], norm[half:-half]
    out /= np.where(norm > 1e-10, norm, 1.0)
    return out


def _amp_to_db(x: npt.NDArray[np.complexfloating]) -> npt.NDArray[np.float64]:
    db = 20.0 * np.log10(np.abs(x) + np.finfo(np.float64).eps)
    return np.maximum(db, np.max(db, axis=-1, keepdims=True) - TOP_DB)


def _triangle(half_width: int) -> npt.NDArray[np.float64]:
    """noisereduce's smoothing ramp: up over `half_width` + 1 steps and down again."""
    ramp = np.concatenate([np.linspace(0, 1, half_width + 1, endpoint=False),
                           np.linspace(1, 0, half_width + 2)])[1:-1]
    return ramp / ramp.sum()


def _convolve_same(values: npt.NDArray[np.float64], kernel: npt.NDArray[np.float64],
                   axis: int) -> npt.NDArray[np.float64]:
    """`values` (2-D) convolved with `kernel` along `axis`, the output centred and as long as
    the input (scipy's mode "same")."""
    k = kernel.shape[0]
    before = (k - 1) // 2
    pad = [(0, 0), (0, 0)]
    pad[axis] = (k - 1 - before, before)
    padded = np.pad(values, pad)
    n = values.shape[axis]
    out = np.zeros_like(values)
    for i, weight in enumerate(kernel[::-1]):
        shifted = padded[i:i + n] if axis == 0 else padded[:, i:i + n]
        out += weight * shifted
    return out


def stationary_gate(y: npt.NDArray[np.floating], sr: int, prop_decrease: float = 1.0,
                    n_fft: int = 1024, padding: int = DEFAULT_PADDING
                    ) -> npt.NDArray[np.floating]:
    """`y` (1-D) with its stationary noise gated, in y's dtype: noisereduce's
    `reduce_noise(y=y, sr=sr, stationary=True, prop_decrease=..., n_fft=..., padding=...)`."""
    signal = np.asarray(y)
    if signal.ndim != 1:
        raise ValueError(f"the gate takes one channel, got shape {signal.shape}")
    hop = n_fft // 4
    n_grad_freq = int(FREQ_SMOOTH_HZ / (sr / (n_fft / 2)))
    n_grad_time = int(TIME_SMOOTH_MS / ((hop / sr) * 1000))
    if n_grad_freq < 1 or n_grad_time < 1:
        raise ValueError(f"an FFT of {n_fft} at {sr} Hz is coarser than the mask's smoothing")

    noise_db = _amp_to_db(_stft(signal, n_fft, hop))
    threshold = noise_db.mean(axis=1) + noise_db.std(axis=1) * N_STD_THRESHOLD  # [freq]

    padded = np.zeros(signal.shape[0] + 2 * padding)  # float64, as noisereduce's chunk
    padded[padding:padding + signal.shape[0]] = signal
    spectrum = _stft(padded, n_fft, hop)
    above = _amp_to_db(spectrum) > threshold[:, None]
    mask = above * prop_decrease + (1.0 - prop_decrease)
    if n_grad_freq > 1 or n_grad_time > 1:
        mask = _convolve_same(mask, _triangle(n_grad_freq), axis=0)
        mask = _convolve_same(mask, _triangle(n_grad_time), axis=1)
    gated = _istft(spectrum * mask, n_fft, hop)
    out = np.zeros(padded.shape[0])
    out[:gated.shape[0]] = gated[:padded.shape[0]]
    return out[padding:padding + signal.shape[0]].astype(signal.dtype)
