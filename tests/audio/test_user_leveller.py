"""The user-channel leveller and its thread stage, on synthetic speech (no sound card)."""

from __future__ import annotations

import threading
from dataclasses import replace

import noisereduce
import numpy as np
import pyloudnorm
import pytest

from app.audio.levelling_stage import LevellingStage
from app.audio.user_leveller import (
    LevellerSettings,
    UserLeveller,
    _gate_padding,
    normalize_loudness,
)
from app.frames import FRAME_SAMPLES, SAMPLE_RATE


def lufs(audio: np.ndarray) -> float:
    return float(pyloudnorm.Meter(SAMPLE_RATE).integrated_loudness(audio.astype(np.float64)))


def voice(seconds: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A voiced-speech stand-in and where its gaps are: syllables of 120-250 ms, each on its
    own pitch (100-220 Hz, gliding up to 20 %) with two formant-like peaks (F1 300-800 Hz,
    F2 900-2500 Hz) and 20 ms ramps, between gaps of 50-200 ms of silence. Speech-like
    enough that the stationary gate, which learns its noise profile from the same second of
    audio, takes about as much from it as from espeak-ng speech (6-8 dB), where a steady
    tone would lose 14 dB. Returns (signal [n] float64, gap mask [n] bool)."""
    rng = np.random.default_rng(seed)
    n = round(seconds * SAMPLE_RATE)
    signal, gaps = np.zeros(n), np.ones(n, dtype=bool)
    ramp = round(0.02 * SAMPLE_RATE)
    fade = np.hanning(2 * ramp)
    start = 0
    while True:
        length = round(rng.uniform(0.12, 0.25) * SAMPLE_RATE)
        if start + length > n:
            return signal, gaps
        t = np.arange(length) / SAMPLE_RATE
        f0 = rng.uniform(100, 220) * (1 + rng.uniform(-0.2, 0.2) * t / t[-1])
        phase = 2 * np.pi * np.cumsum(f0) / SAMPLE_RATE
        f1, f2 = rng.uniform(300, 800), rng.uniform(900, 2500)
        syllable = np.zeros(length)
        for k in range(1, int(4000 / f0.mean()) + 1):
            fk = k * f0.mean()
            amplitude = 1 / (1 + ((fk - f1) / 120) ** 2) + 0.5 / (1 + ((fk - f2) / 200) ** 2)
            syllable += amplitude * np.sin(k * phase)
        syllable[:ramp] *= fade[:ramp]
        syllable[-ramp:] *= fade[ramp:]
        signal[start:start + length] = syllable
        gaps[start:start + length] = False
        start += length + round(rng.uniform(0.05, 0.2) * SAMPLE_RATE)


def speech(seconds: float, target_lufs: float, noise_below_db: float = 35.0,
           seed: int = 0) -> np.ndarray:
    """Syllables plus stationary white noise `noise_below_db` under the voice's RMS, scaled
    to `target_lufs`. [n] float32."""
    signal, _ = voice(seconds)
    rms = np.sqrt(np.mean(signal**2))
    noise = np.random.default_rng(seed).standard_normal(signal.shape[0])
    mixed = signal + noise * rms * 10 ** (-noise_below_db / 20)
    mixed *= 10 ** ((target_lufs - lufs(mixed)) / 20)
    return mixed.astype(np.float32)


def frames_of(audio: np.ndarray) -> list[np.ndarray]:
    count = audio.shape[0] // FRAME_SAMPLES
    return [audio[i * FRAME_SAMPLES:(i + 1) * FRAME_SAMPLES] for i in range(count)]


def level(audio: np.ndarray, leveller: UserLeveller) -> tuple[np.ndarray, list[float]]:
    """The whole signal through `leveller`, frame by frame: (output, gain_db after each)."""
    out, gains = [], []
    for frame in frames_of(audio):
        levelled = leveller.process(frame)
        assert levelled.dtype == np.float32 and levelled.shape == frame.shape
        out.append(levelled)
        gains.append(leveller.gain_db)
    return np.concatenate(out), gains


# ---- the leveller --------------------------------------------------------------------

@pytest.mark.parametrize("input_lufs", [-45.0, -10.0])
def test_speech_is_brought_to_the_target(input_lufs: float) -> None:
    audio = speech(8.0, input_lufs)
    assert lufs(audio) == pytest.approx(input_lufs, abs=0.1)
    out, _ = level(audio, UserLeveller())
    last_4_s = out[-4 * SAMPLE_RATE:]
    assert lufs(last_4_s) == pytest.approx(-24.0, abs=2.0)


def test_the_target_is_configurable() -> None:
    out, _ = level(speech(8.0, -40.0), UserLeveller(LevellerSettings(target_lufs=-18.0)))
    assert lufs(out[-4 * SAMPLE_RATE:]) == pytest.approx(-18.0, abs=2.0)


def test_silence_holds_the_gain_and_stays_silent() -> None:
    leveller = UserLeveller()
    _, gains = level(speech(5.0, -40.0), leveller)
    gain_after_speech = gains[-1]
    assert gain_after_speech > 10.0  # it was lifting quiet speech

    silence = np.zeros(6 * SAMPLE_RATE, dtype=np.float32)
    out, silent_gains = level(silence, leveller)
    # The first frame may carry the gate's tail of the last syllable; then nothing.
    assert np.max(np.abs(out[FRAME_SAMPLES:])) < 1e-6
    # While speech slides out of the meter's 3 s the gain moves a little (the last block
    # measures the final syllable's fade); it never runs up toward +30 dB, and once the
    # window holds only silence it does not move at all.
    assert max(abs(g - gain_after_speech) for g in silent_gains) < 6.0
    assert silent_gains[-1] < 30.0 - 1.0
    assert len(set(silent_gains[-30:])) == 1
    assert leveller.loudness_lufs is not None and not leveller.loudness_lufs > -70.0


def test_silence_from_the_first_frame_is_silence_out() -> None:
    leveller = UserLeveller()
    out, gains = level(np.zeros(4 * SAMPLE_RATE, dtype=np.float32), leveller)
    assert not np.any(out)
    assert set(gains) == {0.0}


def test_a_bad_frame_does_not_poison_the_history() -> None:
    """A NaN frame (a driver glitch) is taken as silence: what follows is levelled as usual."""
    leveller = UserLeveller()
    audio = speech(3.0, -40.0)
    level(audio[:SAMPLE_RATE], leveller)
    leveller.process(np.full(FRAME_SAMPLES, np.nan, dtype=np.float32))
    out, gains = level(audio[SAMPLE_RATE:], leveller)
    assert np.all(np.isfinite(out)) and np.all(np.isfinite(gains))
    assert gains[-1] > 5.0


@pytest.mark.parametrize(("input_lufs", "bound"), [(-58.0, 30.0), (14.0, -24.0)])
def test_gain_stays_within_its_limits(input_lufs: float, bound: float) -> None:
    """-58 LUFS asks for about +41 dB and +14 LUFS (past full scale, as a float pipeline can
    send) for about -30 dB (the gate takes some 7 dB first): both clamp."""
    _, gains = level(speech(6.0, input_lufs), UserLeveller())
    assert all(-24.0 - 1e-9 <= g <= 30.0 + 1e-9 for g in gains)
    assert gains[-1] == pytest.approx(bound, abs=0.5)


def clicky_speech() -> np.ndarray:
    """Quiet speech (-40 LUFS, wants about +16 dB) with a sharp 0.5 click every 0.4 s."""
    audio = speech(6.0, -40.0)
    audio[SAMPLE_RATE // 2::SAMPLE_RATE * 2 // 5] = 0.5
    return audio


def test_the_limiter_keeps_peaks_under_the_ceiling() -> None:
    settings = LevellerSettings(gate=False)  # the gated frame is the input frame
    leveller = UserLeveller(settings)
    for frame in frames_of(clicky_speech()):
        out = leveller.process(frame)
        peak = float(np.max(np.abs(frame)))
        applied = float(np.max(np.abs(out))) / peak
        assert applied <= 0.95 / peak * (1 + 1e-5)
        assert applied <= 10 ** (leveller.gain_db / 20) * (1 + 1e-5)
    assert leveller.gain_db > 10.0  # the clicks did not pull the gain down, the limiter did

    out, _ = level(clicky_speech(), UserLeveller())
    assert np.max(np.abs(out)) <= 0.95 * (1 + 1e-5)


def test_the_output_is_clipped() -> None:
    """A ceiling above full scale lets the clicks past the limiter: the clip still holds."""
    out, _ = level(clicky_speech(), UserLeveller(LevellerSettings(peak_ceiling=4.0)))
    assert np.max(np.abs(out)) <= np.float32(0.99)
    assert np.sum(np.abs(out) == np.float32(0.99)) > 0


def test_the_noise_gate_quietens_the_gaps_between_syllables() -> None:
    """At a fixed 0 dB gain, so only the gate differs: the noise in the gaps loses close to
    the 14 dB of an 80 % reduction, clearly more than the syllables do."""
    audio = speech(6.0, -30.0, noise_below_db=25.0)
    fixed = LevellerSettings(min_gain_db=0.0, max_gain_db=0.0)
    gated, _ = level(audio, UserLeveller(fixed))
    ungated, _ = level(audio, UserLeveller(replace(fixed, gate=False)))
    _, gaps = voice(6.0)
    settled = np.arange(gated.shape[0]) >= 2 * SAMPLE_RATE

    def change_db(where: np.ndarray) -> float:
        return float(10 * np.log10(np.mean(gated[where] ** 2) / np.mean(ungated[where] ** 2)))

    in_gaps = change_db(settled & gaps[:gated.shape[0]])
    in_syllables = change_db(settled & ~gaps[:gated.shape[0]])
    assert in_gaps < -10.0
    assert in_gaps < in_syllables - 4.0


def test_the_gate_matches_noisereduce_with_its_default_padding() -> None:
    """The leveller pads less than noisereduce's default (for speed): same samples out."""
    window = np.concatenate(frames_of(speech(1.0, -30.0, noise_below_db=20.0)))  # 12 frames
    options = {"sr": SAMPLE_RATE, "stationary": True, "prop_decrease": 0.8, "n_fft": 1024}
    default = noisereduce.reduce_noise(y=window, **options)[-FRAME_SAMPLES:]
    ours = noisereduce.reduce_noise(y=window, padding=_gate_padding(1024), **options)
    np.testing.assert_array_equal(ours[-FRAME_SAMPLES:], default)

    leveller = UserLeveller(LevellerSettings(max_gain_db=0.0, min_gain_db=0.0))
    for frame in frames_of(window):
        out = leveller.process(frame)
    np.testing.assert_allclose(out, default, atol=1e-7)


def test_reset_forgets_the_gain() -> None:
    leveller = UserLeveller()
    level(speech(3.0, -40.0), leveller)
    assert leveller.gain_db > 5.0 and leveller.loudness_lufs is not None
    leveller.reset()
    assert leveller.gain_db == 0.0 and leveller.loudness_lufs is None


# ---- whole recordings ----------------------------------------------------------------

def test_normalize_loudness_levels_a_recording() -> None:
    recording = speech(5.0, -37.0)
    levelled = normalize_loudness(recording, SAMPLE_RATE)
    assert levelled.dtype == np.float32
    assert lufs(levelled) == pytest.approx(-24.0, abs=0.5)
    assert lufs(normalize_loudness(recording, SAMPLE_RATE, -30.0)) == pytest.approx(-30, abs=0.5)


@pytest.mark.parametrize("recording", [np.zeros(SAMPLE_RATE * 2), np.ones(SAMPLE_RATE // 5)],
                         ids=["silent", "too-short"])
def test_normalize_loudness_leaves_what_it_cannot_measure(recording: np.ndarray) -> None:
    out = normalize_loudness(recording, SAMPLE_RATE)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, recording)


# ---- the thread stage ----------------------------------------------------------------

class Recorder:
    """A consumer: keeps what it is handed and answers `accept`."""

    def __init__(self, accept: bool = True) -> None:
        self.frames: list[np.ndarray] = []
        self.timeouts: list[float | None] = []
        self.accept = accept

    def __call__(self, pcm: np.ndarray, timeout: float | None) -> bool:
        self.frames.append(pcm)
        self.timeouts.append(timeout)
        return self.accept


def run_stage(stage: LevellingStage, frames: list[np.ndarray], timeout: float = 0.0) -> None:
    """Queue every frame before the thread starts (no race with the queue's size), end the
    input, and wait for the thread."""
    for frame in frames:
        assert stage.push_frame(frame, timeout)
    stage.finish_input()
    stage.start()
    assert stage.join(30.0)


def test_the_stage_hands_the_same_levelled_frame_to_every_consumer() -> None:
    frames = frames_of(speech(3.0, -40.0))
    first, second = Recorder(), Recorder(accept=False)
    ended = threading.Event()
    stage = LevellingStage([first, second], None, queue_frames=64, on_end_of_input=ended.set)
    run_stage(stage, frames)

    assert ended.is_set() and not stage.running
    expected, _ = level(np.concatenate(frames), UserLeveller())
    assert len(first.frames) == len(frames)
    assert all(a is b for a, b in zip(first.frames, second.frames, strict=True))
    np.testing.assert_array_equal(np.concatenate(first.frames), expected)
    assert first.timeouts == [0.0] * len(frames)
    assert stage.dropped_downstream == len(frames)  # the second refused every one
    assert stage.frames_levelled == len(frames)
    assert stage.last_gain_db > 5.0 and stage.last_loudness_lufs is not None


def test_the_stage_passes_frames_through_when_disabled() -> None:
    frames = frames_of(speech(2.0, -40.0))
    consumer = Recorder()
    stage = LevellingStage([consumer], LevellerSettings(), queue_frames=64)
    stage.set_enabled(False)
    run_stage(stage, frames, timeout=0.5)

    assert not stage.enabled and stage.frames_levelled == 0
    np.testing.assert_array_equal(np.concatenate(consumer.frames), np.concatenate(frames))
    assert consumer.timeouts == [0.5] * len(frames)  # a file feeder's timeout travels on


def test_a_file_frame_waits_for_a_busy_consumer_instead_of_being_dropped() -> None:
    class Busy(Recorder):
        def __init__(self) -> None:
            super().__init__()
            self.refusals = 2

        def __call__(self, pcm: np.ndarray, timeout: float | None) -> bool:
            super().__call__(pcm, timeout)
            self.refusals -= 1
            return self.refusals < 0

    frame = frames_of(speech(2.0, -40.0))[:1]
    busy = Busy()
    stage = LevellingStage([busy], None, queue_frames=4)
    run_stage(stage, frame, timeout=0.5)
    assert len(busy.frames) == 3 and stage.dropped_downstream == 0


def test_a_full_stage_drops_live_frames_and_counts_them() -> None:
    stage = LevellingStage([Recorder()], None, queue_frames=2)
    frame = np.zeros(FRAME_SAMPLES, dtype=np.float32)
    assert [stage.push_frame(frame, 0.0) for _ in range(3)] == [True, True, False]
    assert stage.dropped_frames == 1
    with pytest.raises(ValueError):
        stage.push_frame(np.zeros(100, dtype=np.float32))


def test_the_stage_stops_promptly() -> None:
    consumer = Recorder()
    stage = LevellingStage([consumer], None)
    stage.start()
    assert stage.push_frame(np.zeros(FRAME_SAMPLES, dtype=np.float32), 0.0)
    assert stage.stop(2.0)
    assert not stage.running
