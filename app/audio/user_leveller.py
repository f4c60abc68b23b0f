"""The user-channel leveller: the microphone brought to the loudness the speech model knows.

Why: the speech model (the Context Spanning fine-tune of PersonaPlex) was trained on user
audio at a median of -24 LUFS. A quiet laptop microphone at -45 LUFS or a headset shouting at
-10 LUFS is outside that distribution, and the model hears it worse (late or missed turns,
mishearing). Its reference server levels the live microphone before both the model and the
speech recogniser hear it; this module does the same, on our own 80 ms frames.

Per frame (1920 float32 samples, 24 kHz mono), in order:
1. Noise gate: noisereduce's stationary spectral gate (80 % reduction, 1024-point FFT; on
   numpy, app/audio/spectral_gate.py) over the last 1 s of raw audio, of which the newest
   frame is kept. The noise profile comes from that same second, so a steady fan or hiss
   between words is pushed down; with under 0.5 s of history the frame passes un-gated.
   The same rule takes some 6-8 dB from speech itself in the frequency bins it fills for
   most of that second (measured on espeak-ng speech); the meter reads after the gate, so
   the gain makes up for it.
2. Meter: ITU-R BS.1770 integrated loudness (pyloudnorm's, on numpy: app/audio/loudness.py)
   of the last 3 s of gated audio (at least 0.4 s, one BS.1770 block). Its -70 LUFS absolute
   gate and relative gate make pauses between words not count.
3. Gain toward the target: target - loudness, clamped to [-24, +30] dB, followed with one-pole
   smoothing (time constant 0.1 s, the same up and down). In silence (loudness <= -70 LUFS or
   not finite) the gain holds, so a pause is not pumped up into hiss.
4. Peak limiter: the linear gain is capped at 0.95 / peak of the gated frame, and the output
   clipped to +-0.99, so a gain set for soft speech never clips a sudden loud syllable.

Voice-prompt WAVs are levelled once, whole, by `normalize_loudness` before encoding.

Cost: `python -c "from app.audio.user_leveller import measure_leveller_cost as m; print(m())"`
prints the per-frame time (the gate's STFTs over 1 s dominate).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from app.audio.loudness import BLOCK_S as _BS1770_BLOCK_S  # the meter refuses less
from app.audio.loudness import integrated_loudness, normalized
from app.audio.spectral_gate import DEFAULT_PADDING as _NOISEREDUCE_PADDING
from app.audio.spectral_gate import TIME_SMOOTH_MS, stationary_gate
from app.frames import FRAME_SAMPLES, SAMPLE_RATE

_GATE_SMOOTH_S = TIME_SMOOTH_MS / 1000.0  # the gate's time smoothing of its mask (50 ms)


def _gate_padding(n_fft: int) -> int:
    """Zero padding for the gate that gives bit-identical output to its default.

    The default pads the 1 s window with 30000 zeros each side, 3.5x the audio, which makes
    the gate about 5x slower. Zeros further out than one STFT window plus the mask's time
    smoothing reach no output sample; what does matter is where the STFT frame grid falls,
    so the padding keeps the default's remainder modulo the hop (the hop is n_fft / 4).
    """
    hop = n_fft // 4
    reach = 2 * n_fft + round(_GATE_SMOOTH_S * SAMPLE_RATE)
    return _NOISEREDUCE_PADDING % hop + hop * math.ceil(reach / hop)


@dataclass(frozen=True)
class LevellerSettings:
    target_lufs: float = -24.0  # the training distribution's median
    min_gain_db: float = -24.0
    max_gain_db: float = 30.0
    smoothing_s: float = 0.1  # one-pole time constant of the gain, up and down
    gate: bool = True
    gate_prop_decrease: float = 0.8
    gate_n_fft: int = 1024
    gate_history_s: float = 1.0
    gate_min_s: float = 0.5
    meter_window_s: float = 3.0
    meter_min_s: float = 0.4
    hold_below_lufs: float = -70.0  # BS.1770's absolute gate: below it is silence
    peak_ceiling: float = 0.95
    clip: float = 0.99

    def __post_init__(self) -> None:
        if not self.min_gain_db <= self.max_gain_db:
            raise ValueError("min_gain_db must not exceed max_gain_db")
        if self.smoothing_s <= 0:
            raise ValueError("smoothing_s must be positive")
        if self.gate_n_fft < 128:
            raise ValueError("gate_n_fft below 128 is finer than the gate's 500 Hz smoothing")
        if not 0 < self.gate_min_s <= self.gate_history_s:
            raise ValueError("need 0 < gate_min_s <= gate_history_s")
        if not 0 < self.meter_min_s <= self.meter_window_s:
            raise ValueError("need 0 < meter_min_s <= meter_window_s")
        if self.meter_window_s < _BS1770_BLOCK_S:
            raise ValueError(f"the meter needs at least {_BS1770_BLOCK_S} s (one BS.1770 block)")


class _SlidingWindow:
    """The last `capacity` samples, preallocated. New samples shift the old ones left, so
    the recent audio is always one contiguous view that the gate and the meter read without
    a copy (a wrap-around ring would have to be joined into a copy on every read anyway)."""

    def __init__(self, capacity: int) -> None:
        self._buf = np.zeros(capacity, dtype=np.float32)  # [capacity]
        self.filled = 0

    @property
    def capacity(self) -> int:
        return self._buf.shape[0]

    def push(self, samples: np.ndarray) -> None:
        n = samples.shape[0]
        self._buf[:-n] = self._buf[n:]  # numpy copies overlapping slices correctly
        self._buf[-n:] = samples
        self.filled = min(self.capacity, self.filled + n)

    def recent(self) -> np.ndarray:
        """The filled part, oldest first: [filled]. A view; valid until the next push."""
        return self._buf[self.capacity - self.filled:]

    def clear(self) -> None:
        self._buf.fill(0.0)
        self.filled = 0


class UserLeveller:
    """Levels the user's microphone frame by frame. One instance per stream; not thread-safe
    (one thread calls `process`)."""

    def __init__(self, settings: LevellerSettings | None = None) -> None:
        self.settings = settings or LevellerSettings()
        s = self.settings
        self._raw = _SlidingWindow(round(s.gate_history_s * SAMPLE_RATE))
        self._gated = _SlidingWindow(round(s.meter_window_s * SAMPLE_RATE))
        self._gate_min = max(round(s.gate_min_s * SAMPLE_RATE), s.gate_n_fft)
        self._meter_min = max(round(s.meter_min_s * SAMPLE_RATE),
                              math.ceil(_BS1770_BLOCK_S * SAMPLE_RATE))
        self._gate_padding = _gate_padding(s.gate_n_fft)
        self._gain_db = 0.0
        self._loudness: float | None = None

    @property
    def gain_db(self) -> float:
        """The smoothed gain toward the target, before the peak limiter."""
        return self._gain_db

    @property
    def loudness_lufs(self) -> float | None:
        """The last measured loudness of the gated audio (-inf in silence), or None before
        there was enough audio to measure."""
        return self._loudness

    def reset(self) -> None:
        self._raw.clear()
        self._gated.clear()
        self._gain_db = 0.0
        self._loudness = None

    def process(self, frame: np.ndarray) -> np.ndarray:
        """Level one frame ([n] float, n up to the gate history; 1920 in the app).
        Returns a new float32 array of the same shape."""
        if frame.ndim != 1 or frame.shape[0] > min(self._raw.capacity, self._gated.capacity):
            raise ValueError(f"a frame is a 1-D array of at most {self._raw.capacity} samples, "
                             f"got shape {frame.shape}")
        n = frame.shape[0]
        if n == 0:
            return np.zeros(0, dtype=np.float32)
        # A NaN or inf would poison 3 s of meter history: treat it as silence.
        pcm = np.nan_to_num(np.asarray(frame, dtype=np.float32), nan=0.0, posinf=0.0,
                            neginf=0.0)
        gated = self._gate(pcm)  # [n]
        self._gated.push(gated)
        self._update_gain(self._measure(), n)
        return self._apply_gain(gated)

    def _gate(self, pcm: np.ndarray) -> np.ndarray:
        s = self.settings
        self._raw.push(pcm)
        if not s.gate or self._raw.filled < self._gate_min:
            return pcm
        window = self._raw.recent()  # [filled <= 1 s]
        if not np.any(window):
            return pcm  # all zeros: nothing to gate (and no noise profile to learn)
        cleaned = stationary_gate(window, SAMPLE_RATE, s.gate_prop_decrease, s.gate_n_fft,
                                  self._gate_padding)
        return np.asarray(cleaned[-pcm.shape[0]:], dtype=np.float32)

    def _measure(self) -> float | None:
        if self._gated.filled < self._meter_min:
            return None
        loudness = integrated_loudness(self._gated.recent(), SAMPLE_RATE)
        self._loudness = loudness
        return loudness

    def _update_gain(self, loudness: float | None, n: int) -> None:
        s = self.settings
        if loudness is None or not math.isfinite(loudness) or loudness <= s.hold_below_lufs:
            return  # silence or too little audio: hold
        desired = min(max(s.target_lufs - loudness, s.min_gain_db), s.max_gain_db)
        a = math.exp(-(n / SAMPLE_RATE) / s.smoothing_s)  # exp(-0.08 / 0.1) for 80 ms
        self._gain_db = a * self._gain_db + (1.0 - a) * desired

    def _apply_gain(self, gated: np.ndarray) -> np.ndarray:
        s = self.settings
        gain = 10.0 ** (self._gain_db / 20.0)
        peak = float(np.max(np.abs(gated)))
        if peak > 0.0:
            gain = min(gain, s.peak_ceiling / peak)
        out = gated * np.float32(gain)
        np.clip(out, -s.clip, s.clip, out=out)
        return out.astype(np.float32, copy=False)


def normalize_loudness(pcm: np.ndarray, sample_rate: int,
                       target_lufs: float = -24.0) -> np.ndarray:
    """A whole recording (e.g. a voice prompt) at `target_lufs` integrated loudness, as float32.

    Returned unchanged (as float32) when it is silent or shorter than one BS.1770 block, where
    there is no loudness to correct. No limiter: a prompt with loud peaks may leave +-1.
    """
    audio = np.asarray(pcm, dtype=np.float32)
    if audio.shape[0] < math.ceil(_BS1770_BLOCK_S * sample_rate):
        return audio
    loudness = integrated_loudness(audio, sample_rate)
    if not math.isfinite(loudness):
        return audio
    levelled = normalized(audio, loudness, target_lufs)
    return np.asarray(levelled, dtype=np.float32)


def _speech_like(seconds: float, seed: int = 0) -> np.ndarray:
    """A voiced-speech stand-in: a 140 Hz harmonic tone, syllables at about 4 per second,
    light noise. [seconds * 24000] float32 at about -30 LUFS."""
    rng = np.random.default_rng(seed)
    t = np.arange(round(seconds * SAMPLE_RATE)) / SAMPLE_RATE
    f0 = 140.0 * (1.0 + 0.05 * np.sin(2 * np.pi * 0.7 * t))
    phase = 2 * np.pi * np.cumsum(f0) / SAMPLE_RATE
    voice = sum(np.sin(k * phase) / k for k in range(1, 12))
    syllables = np.clip(np.sin(2 * np.pi * 4.0 * t), 0.0, None) ** 2
    signal = 0.05 * voice * syllables + 0.002 * rng.standard_normal(t.shape[0])
    return signal.astype(np.float32)


def measure_leveller_cost(frames: int = 250) -> dict:
    """Time `UserLeveller.process` per 80 ms frame on synthetic speech, once the gate's and
    the meter's windows are full (the steady state a conversation runs in)."""
    warmup = math.ceil(LevellerSettings().meter_window_s * SAMPLE_RATE / FRAME_SAMPLES)
    audio = _speech_like((warmup + frames) * FRAME_SAMPLES / SAMPLE_RATE)
    leveller = UserLeveller()
    times_ms: list[float] = []
    for i in range(warmup + frames):
        frame = audio[i * FRAME_SAMPLES:(i + 1) * FRAME_SAMPLES]
        start = time.perf_counter()
        leveller.process(frame)
        if i >= warmup:
            times_ms.append((time.perf_counter() - start) * 1000.0)
    return {
        "frames": frames,
        "median_ms": float(np.median(times_ms)),
        "p95_ms": float(np.percentile(times_ms, 95)),
        "includes": "noise gate (stationary spectral gate, 1 s window) + BS.1770 meter "
                    "(3 s window) + gain + limiter, per 80 ms frame",
    }
