"""`python main.py bench audio-latency|echo`: the live audio path, measured on real devices.

Both benches run LiveAudio (PortAudio callbacks, jitter buffer, echo canceller) on a loopback:
by default a private PulseAudio daemon with a null sink, whose monitor is the "microphone",
so what the app plays comes back bit for bit as if the speaker were taped to the mic. With
`null_sink=False` they use the system's default devices instead (a real room, a real mic).

- audio-latency: every captured frame is answered at once with one played frame (a zero-time
  engine), so a chirp played "in reply to" capture frame n comes back at a measured position;
  latency is counted from the first sample of frame n (the 80 ms framing wait included) to the
  chirp's arrival in the capture. The engine's own share (push_frame to AudioOut on the tiny
  model) is measured separately and reported beside it.
- echo: the model's voice is played and its echo cancelled, first alone (ERLE: dB of echo
  removed), then with the user talking over it (near-end preservation: the share of the
  user's speech the canceller lets through; ERLE alone cannot tell cancelling from muting).
  Twice: on the live path (the null sink's monitor is a *digital* loopback, the played
  samples returned exactly, with the user's voice mixed in by a second stream), and offline
  through a simulated room's impulse responses (pyroomacoustics, the `bench` extra).
"""

from __future__ import annotations

import math
import os
import queue
import shutil
import signal
import statistics
import subprocess
import tempfile
import threading
import time
import wave
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import numpy as np

from app.audio.live_audio import Canceller, LiveAudio
from app.audio.resampler import StreamingResampler
from app.frames import FRAME_SAMPLES, SAMPLE_RATE
from app.settings.schema import EchoMode

NULL_SINK = "vsink"


class PrivatePulseAudio(AbstractContextManager["PrivatePulseAudio"]):
    """A PulseAudio daemon of our own with one null sink, in a private runtime directory.

    PULSE_SERVER points this process (and children) at it, so a user's or another test's
    daemon is never touched; the monitor of the sink is the default source.
    """

    def __init__(self, rate: int = SAMPLE_RATE, timeout_s: float = 10.0) -> None:
        self.rate = rate
        self.timeout_s = timeout_s
        self.runtime_dir: Path | None = None
        self.pid: int | None = None
        self._saved_env: dict[str, str | None] = {}

    def __enter__(self) -> PrivatePulseAudio:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _env(self) -> dict[str, str]:
        assert self.runtime_dir is not None
        return {
            "PULSE_RUNTIME_PATH": str(self.runtime_dir),
            "PULSE_STATE_PATH": str(self.runtime_dir / "state"),
            "PULSE_SERVER": f"unix:{self.runtime_dir / 'native'}",
        }

    def start(self) -> None:
        binary = shutil.which("pulseaudio")
        if binary is None:
            raise RuntimeError("pulseaudio is not installed (apt-get install pulseaudio "
                               "pulseaudio-utils libasound2-plugins libportaudio2)")
        self.runtime_dir = Path(tempfile.mkdtemp(prefix="contextspan-pulse-"))
        env = {**os.environ, **self._env()}
        socket = self.runtime_dir / "native"
        subprocess.run(
            [binary, "-n", "--daemonize=yes", "--exit-idle-time=-1", "--log-target=stderr",
             f"--load=module-native-protocol-unix auth-anonymous=1 socket={socket}",
             f"--load=module-null-sink sink_name={NULL_SINK} rate={self.rate} channels=1"],
            env=env, check=True, capture_output=True, timeout=self.timeout_s,
        )
        pid_file = self.runtime_dir / "pid"
        deadline = time.monotonic() + self.timeout_s
        while True:  # bounded wait for the daemon to answer
            ready = subprocess.run(["pactl", "info"], env=env, capture_output=True,
                                   timeout=self.timeout_s).returncode == 0
            if ready and pid_file.is_file():
                break
            if time.monotonic() > deadline:
                raise RuntimeError("the private PulseAudio daemon did not come up")
            time.sleep(0.05)
        self.pid = int(pid_file.read_text().split()[0])
        defaults = (["set-default-sink", NULL_SINK], ["set-default-source", f"{NULL_SINK}.monitor"])
        for args in defaults:
            subprocess.run(["pactl", *args], env=env, check=True, capture_output=True,
                           timeout=self.timeout_s)
        for key, value in self._env().items():
            self._saved_env[key] = os.environ.get(key)
            os.environ[key] = value
        self._wait_for_portaudio()

    def _wait_for_portaudio(self) -> None:
        """PortAudio lists devices once when it starts: restart it until it sees pulse."""
        import sounddevice as sd

        from app.audio.devices import list_devices, rescan

        deadline = time.monotonic() + self.timeout_s
        while True:
            rescan()
            inputs, outputs = list_devices()
            if "pulse" in inputs and "pulse" in outputs:
                sd.default.reset()
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"PortAudio does not list the pulse device: {inputs}")
            time.sleep(0.1)

    def stop(self) -> None:
        for key, value in self._saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        self._saved_env.clear()
        if self.pid is not None:
            try:
                os.kill(self.pid, signal.SIGTERM)
                deadline = time.monotonic() + self.timeout_s
                while time.monotonic() < deadline:
                    os.kill(self.pid, 0)  # raises once it is gone
                    time.sleep(0.05)
            except ProcessLookupError:
                pass
            self.pid = None
        if self.runtime_dir is not None:
            shutil.rmtree(self.runtime_dir, ignore_errors=True)
            self.runtime_dir = None


def _loopback(null_sink: bool) -> AbstractContextManager:
    return PrivatePulseAudio() if null_sink else nullcontext()


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def _chirp(ms: float = 10.0, f0: float = 500.0, f1: float = 6000.0) -> np.ndarray:
    n = int(SAMPLE_RATE * ms / 1000)
    t = np.arange(n) / SAMPLE_RATE
    phase = 2 * np.pi * (f0 * t + (f1 - f0) * t**2 / (2 * t[-1]))
    return (0.5 * np.sin(phase) * np.hanning(n)).astype(np.float32)  # [n]


class _Recorder:
    """on_frame for the benches: keeps every frame, replies with the next frame to play."""

    def __init__(self, audio_ref: list[LiveAudio], reply: Callable[[int], np.ndarray]) -> None:
        self.frames: list[np.ndarray] = []
        self.arrived = threading.Event()
        self._audio_ref = audio_ref
        self._reply = reply

    def __call__(self, frame: np.ndarray) -> bool:
        index = len(self.frames)
        self.frames.append(frame)
        self._audio_ref[0].play(self._reply(index))
        self.arrived.set()
        return True


def _run_live(reply: Callable[[int], np.ndarray], frames: int, echo_mode: EchoMode,
              timeout_s: float, null_sink: bool) -> tuple[list[np.ndarray], dict]:
    """Run LiveAudio until `frames` frames were captured (bounded by timeout_s)."""
    errors: list[str] = []
    ref: list[LiveAudio] = []
    recorder = _Recorder(ref, reply)
    audio = LiveAudio(recorder, errors.append, echo_mode=echo_mode)
    ref.append(audio)
    with _loopback(null_sink):
        if not audio.start():
            raise RuntimeError(f"audio did not start: {errors}")
        deadline = time.monotonic() + timeout_s
        while len(recorder.frames) < frames and time.monotonic() < deadline and not errors:
            recorder.arrived.wait(0.2)
            recorder.arrived.clear()
        info = {"input": audio.input_name, "output": audio.output_name,
                "counters": audio.counters(), "errors": errors}
        audio.stop()
    return recorder.frames, info


def run_latency_bench(seconds: float = 10.0, null_sink: bool = True, engine: bool = True) -> dict:
    """Mic-to-speaker latency of the live audio path (and the tiny engine's share)."""
    chirp = _chirp()
    warmup = 25  # 2 s: PulseAudio prebuffers a new playback stream before its clock runs
    every = 6  # a chirp every 480 ms; a reply must come back before the next one is played
    total = warmup + max(every, int(seconds * SAMPLE_RATE / FRAME_SAMPLES))
    silence = np.zeros(FRAME_SAMPLES, dtype=np.float32)
    click = silence.copy()
    click[: chirp.shape[0]] = chirp

    def reply(index: int) -> np.ndarray:
        return click if index >= warmup and (index - warmup) % every == 0 else silence

    frames, info = _run_live(reply, total, "headset", seconds + 15.0, null_sink)
    captured = np.concatenate(frames) if frames else np.zeros(0, np.float32)  # [n]
    latencies = []
    window = every * FRAME_SAMPLES
    energy = float(np.dot(chirp, chirp))
    for index in range(warmup, len(frames) - every, every):
        start = index * FRAME_SAMPLES  # first sample of the frame the chirp "answers"
        segment = captured[start : start + window + chirp.shape[0]]
        score = np.correlate(segment, chirp, mode="valid") / energy  # [window + 1]
        peak = int(np.argmax(score))
        if score[peak] > 0.5:
            latencies.append(peak / SAMPLE_RATE * 1000.0)
    result: dict = {
        "audio_path": {
            "chirps": len(latencies),
            "median_ms": statistics.median(latencies) if latencies else None,
            "p95_ms": _percentile(latencies, 0.95) if latencies else None,
            "framing_ms": FRAME_SAMPLES / SAMPLE_RATE * 1000.0,
            "devices": info,
        },
    }
    if engine:
        try:
            result["engine"] = _engine_share()
        except Exception as exc:  # the audio numbers stand without it
            result["engine"] = {"error": f"{type(exc).__name__}: {exc}"}
    return result


def _engine_share(frames: int = 60) -> dict:
    """push_frame -> AudioOut time of the tiny model, one frame at a time."""
    from app.checkpoints.catalog import get_manifest
    from app.checkpoints.loader import ensure_built, load_checkpoint
    from app.engine.events import AudioOut, EngineReady
    from app.engine.local_engine import open_conversation
    from app.engine.speech_engine import EngineOptions

    manifest = get_manifest("tiny")
    checkpoint = load_checkpoint(manifest, ensure_built(manifest), "cpu")
    events: queue.SimpleQueue = queue.SimpleQueue()
    engine = open_conversation(checkpoint, EngineOptions(seed=0, chunk_limit=1), events)
    engine.start()
    times: list[float] = []
    try:
        if not engine.ready.wait(60.0):
            raise RuntimeError("the tiny engine did not get ready")
        pcm = (0.05 * np.random.default_rng(0).standard_normal(FRAME_SAMPLES)).astype(np.float32)
        for _ in range(frames):
            start = time.monotonic()
            engine.push_frame(pcm, timeout=1.0)
            while True:
                event = events.get(timeout=5.0)
                if isinstance(event, AudioOut):
                    times.append((event.monotonic_s - start) * 1000.0)
                    break
                if not isinstance(event, EngineReady) and type(event).__name__ == "EngineError":
                    raise RuntimeError(str(event))
    finally:
        engine.stop(10.0)
    return {"model": "tiny", "device": "cpu", "median_ms": statistics.median(times),
            "p95_ms": _percentile(times, 0.95)}


# ---- echo ------------------------------------------------------------------------------------

ROOM_INSTALL_HINT = ("the simulated room needs pyroomacoustics: pip install 'contextspan[bench]' "
                     "(or pip install pyroomacoustics)")
USER_PHRASE = "Sorry to interrupt, but how far is Canberra from Sydney by car?"
MODEL_REPLY = ("The capital of Australia is Canberra. It was chosen as a compromise between "
               "Sydney and Melbourne, and it became the seat of government in nineteen "
               "twenty seven. Would you like to hear more about its history?")


def espeak(text: str, voice: str = "en-us", words_per_minute: int = 160) -> np.ndarray | None:
    """`text` spoken by espeak-ng, trimmed of its leading and trailing silence, peak 0.5:
    [n] float32 at 24 kHz. None when espeak-ng is not installed or fails."""
    binary = shutil.which("espeak-ng")
    if binary is None:
        return None
    out = subprocess.run([binary, "-v", voice, "-s", str(words_per_minute), "--stdout", text],
                         capture_output=True, timeout=30)
    if out.returncode != 0 or not out.stdout:
        return None
    with tempfile.NamedTemporaryFile(suffix=".wav") as tmp:
        tmp.write(out.stdout)
        tmp.flush()
        with wave.open(tmp.name) as wav:
            rate = wav.getframerate()
            pcm = np.frombuffer(wav.readframes(wav.getnframes()), dtype=np.int16)
    voice_pcm = pcm.astype(np.float32) / 32768.0
    if rate != SAMPLE_RATE:
        resampler = StreamingResampler(rate, SAMPLE_RATE)
        voice_pcm = np.concatenate([resampler.process(voice_pcm), resampler.flush()])
    loud = np.flatnonzero(np.abs(voice_pcm) > 0.01 * float(np.max(np.abs(voice_pcm))))
    if loud.size == 0:
        return None
    voice_pcm = voice_pcm[loud[0] : loud[-1] + 1]
    return (0.5 * voice_pcm / float(np.max(np.abs(voice_pcm)))).astype(np.float32)


def _synthetic_voice(seconds: float, seed: int, f0_hz: float, syllables_hz: float) -> np.ndarray:
    """A gliding harmonic source with syllable-rate bursts: [n] float32 at 24 kHz."""
    n = int(seconds * SAMPLE_RATE)
    rng = np.random.default_rng(seed)
    t = np.arange(n) / SAMPLE_RATE
    f0 = f0_hz + 0.35 * f0_hz * np.sin(2 * np.pi * 0.3 * t) + (
        10 * rng.standard_normal() * np.sin(7 * t))
    phase = np.cumsum(2 * np.pi * f0 / SAMPLE_RATE)
    source = sum(np.sin(k * phase) / k for k in range(1, 30))
    bursts = np.clip(np.sin(2 * np.pi * syllables_hz * t), 0, None) ** 2
    return (0.3 * source * bursts / np.max(np.abs(source))).astype(np.float32)


def speech_like(seconds: float, seed: int = 0) -> np.ndarray:
    """The model's voice for the echo bench: espeak-ng when installed, else a synthetic
    voiced signal. [n] float32 at 24 kHz."""
    voice = espeak(MODEL_REPLY)
    if voice is None:
        return _synthetic_voice(seconds, seed, 110.0, 4.0)
    return np.resize(voice, int(seconds * SAMPLE_RATE)).astype(np.float32)


def user_speech(max_seconds: float) -> np.ndarray:
    """The user talking over the model (another voice, another sentence): [n] float32."""
    voice = espeak(USER_PHRASE, voice="en-us+f3", words_per_minute=150)
    if voice is None:
        voice = _synthetic_voice(4.0, 7, 210.0, 5.3)
    return voice[: int(max_seconds * SAMPLE_RATE)]


class VoicePlayer:
    """Plays `pcm` ([n] float32, 24 kHz) on the default output device from when `gate` is
    set (at once without one), in a PortAudio stream of its own: on the null sink it is
    mixed with what the app plays, so the sink's monitor hears both, like a microphone in
    a room with the user and the speaker. `loop` repeats it until stop()."""

    def __init__(self, pcm: np.ndarray, loop: bool = False,
                 gate: threading.Event | None = None) -> None:
        self.pcm = np.asarray(pcm, dtype=np.float32)
        self.loop = loop
        self.gate = gate
        self.played_samples = 0
        self._stream: Any = None  # a sounddevice.OutputStream (untyped), opened by start()

    def start(self) -> None:
        import sounddevice as sd

        self._stream = sd.OutputStream(samplerate=SAMPLE_RATE, channels=1, dtype="float32",
                                       blocksize=SAMPLE_RATE // 50, latency="high",
                                       callback=self._callback)  # a gap would move the voice
        self._stream.start()

    def stop(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None:
            stream.abort(ignore_errors=True)
            stream.close(ignore_errors=True)

    def _callback(self, outdata: np.ndarray, frames: int, _time: object, _status: object) -> None:
        out = outdata[:, 0]  # [frames]
        out[:] = 0.0
        if self.gate is not None and not self.gate.is_set():
            return
        filled = 0
        while filled < frames:
            start = self.played_samples % self.pcm.shape[0] if self.loop else self.played_samples
            part = self.pcm[start : start + frames - filled]
            if part.shape[0] == 0:
                return
            out[filled : filled + part.shape[0]] = part
            filled += part.shape[0]
            self.played_samples += part.shape[0]


CancellerFactory = Callable[[], Canceller]


def _app_canceller() -> Canceller:
    from app.audio.echo_canceller import EchoCanceller

    return EchoCanceller()


def _settings_of(canceller: object) -> dict | None:
    """The canceller's settings in force (EchoCanceller.describe), None for a bench's double."""
    describe = getattr(canceller, "describe", None)
    return describe() if callable(describe) else None


def near_end_preservation(sent: np.ndarray, near: np.ndarray, taps: int = 1024
                          ) -> tuple[float, float]:
    """(kept, other): the share of the user's speech energy still in what the canceller sent
    on, and the energy of everything else in it, both relative to the user's speech.

    `near` is the user's speech as it reached the microphone, sample-aligned with `sent`
    ([n] each). What counts as kept is the part of `sent` the best causal linear filter of
    `taps` samples (43 ms) makes from `near`: a canceller's own delay and band-split filters
    keep speech, muting, gating and suppression lose it. 1: all kept; 0: muted.
    """
    near = near.astype(np.float64)
    sent = sent.astype(np.float64)
    n = near.shape[0]
    size = 1 << int(np.ceil(np.log2(2 * n)))
    near_f = np.fft.rfft(near, size)
    auto = np.fft.irfft(near_f * np.conj(near_f), size)[:taps]  # [taps]
    cross = np.fft.irfft(np.fft.rfft(sent, size) * np.conj(near_f), size)[:taps]  # [taps]
    lags = np.abs(np.arange(taps)[:, None] - np.arange(taps)[None, :])
    energy = float(auto[0])
    if energy <= 0.0:
        return 0.0, 0.0
    gram = auto[lags] + 1e-9 * energy * np.eye(taps)  # [taps, taps] Toeplitz
    fitted = _convolve(near, np.linalg.solve(gram, cross))[:n]  # [n]
    rest = sent - fitted
    return float(np.dot(fitted, fitted)) / energy, float(np.dot(rest, rest)) / energy


def _db(ratio: float) -> float | None:
    return round(10.0 * math.log10(ratio), 2) if ratio > 0.0 else None


def _double_talk(sent: np.ndarray, near: np.ndarray, echo: np.ndarray) -> dict:
    """`near`, `echo`: the user's speech and the model's echo as they reached the mic."""
    kept, other = near_end_preservation(sent, near)
    near_energy = float(np.dot(near, near))
    return {"near_end_preservation": round(kept, 4),
            "near_end_preservation_db": _db(kept),
            "other_than_user_db": _db(other),
            "user_to_echo_db": _db(near_energy / max(float(np.dot(echo, echo)), 1e-12)),
            "echo_reduction_db": _db(float(np.dot(echo, echo)) / max(other * near_energy,
                                                                       1e-12)),
            "seconds": round(near.shape[0] / SAMPLE_RATE, 2)}


def _erle(raw: np.ndarray, cleaned: np.ndarray) -> float | None:
    """dB of echo removed, over frames where only the model talks."""
    removed = float(np.dot(raw, raw)) / max(float(np.dot(cleaned, cleaned)), 1e-12)
    return round(10.0 * math.log10(max(removed, 1e-12)), 2) if raw.size else None


def _convolve(signal: np.ndarray, response: np.ndarray) -> np.ndarray:
    """Full linear convolution by FFT ([n + m - 1]); a room response is thousands of taps."""
    size = signal.shape[0] + response.shape[0] - 1
    fft_size = 1 << int(np.ceil(np.log2(size)))
    spectrum = np.fft.rfft(signal, fft_size) * np.fft.rfft(response, fft_size)
    return np.fft.irfft(spectrum, fft_size)[:size]


def _room(rt60_s: float = 0.3) -> dict:
    """Room impulse responses (image-source method, pyroomacoustics) of a 5 x 4 x 2.7 m room:
    the speaker 30 cm from the microphone (a laptop), the user 85 cm away."""
    try:
        import pyroomacoustics as pra
    except ImportError as exc:
        raise RuntimeError(ROOM_INSTALL_HINT) from exc
    dims = [5.0, 4.0, 2.7]
    absorption, max_order = pra.inverse_sabine(rt60_s, dims)
    room = pra.ShoeBox(dims, fs=SAMPLE_RATE, materials=pra.Material(absorption),
                       max_order=max_order)
    mic, speaker, user = [2.0, 2.0, 0.9], [2.3, 2.0, 0.9], [2.0, 2.85, 1.2]
    room.add_source(speaker)
    room.add_source(user)
    room.add_microphone(mic)
    room.compute_rir()
    speaker_rir = np.asarray(room.rir[0][0], dtype=np.float64)  # [taps]
    user_rir = np.asarray(room.rir[0][1], dtype=np.float64)  # [taps]
    return {"speaker_rir": speaker_rir, "user_rir": user_rir,
            "describe": {"dims_m": dims, "rt60_ms_target": round(rt60_s * 1000),
                         "rt60_ms_measured": round(float(pra.experimental.measure_rt60(
                             speaker_rir, fs=SAMPLE_RATE)) * 1000),
                         "wall_absorption": round(float(absorption), 3),
                         "image_source_order": int(max_order),
                         "speaker_to_mic_m": 0.3, "user_to_mic_m": 0.9,
                         "rir_ms": round(speaker_rir.shape[0] / SAMPLE_RATE * 1000)}}


def run_room_echo(canceller_factory: CancellerFactory | None = None, seconds: float = 12.0,
                  converge_s: float = 4.0, device_delay_ms: float = 40.0,
                  voices: tuple[np.ndarray, np.ndarray] | None = None) -> dict:
    """The echo through a simulated room, offline: no devices, the canceller fed 80 ms frames
    as LiveAudio's capture callback feeds it (the far end = the frame played).

    `voices`: (the model's, the user's), [n] float32 at 24 kHz, instead of espeak-ng's through
    StreamingResampler, whose output differs by a few int16 steps from run to run; AEC3 turns
    that into about +-0.03 of near-end preservation, so a test passes voices of its own.
    """
    room = _room()
    far = (speech_like(seconds) if voices is None
           else np.resize(voices[0], int(seconds * SAMPLE_RATE)).astype(np.float32))  # [n]
    n = far.shape[0] - far.shape[0] % FRAME_SAMPLES
    far = far[:n]
    delay = int(device_delay_ms * SAMPLE_RATE / 1000)  # the sound card's output + input latency
    echo = np.zeros(n)
    echo[delay:] = _convolve(far, room["speaker_rir"])[: n - delay]  # [n]
    talk_from = int((converge_s + 1.0) * SAMPLE_RATE)
    user_s = (n - talk_from) / SAMPLE_RATE - 0.5
    user = user_speech(user_s) if voices is None else voices[1][: int(user_s * SAMPLE_RATE)]
    near = np.zeros(n)
    heard = _convolve(user, room["user_rir"])[: user.shape[0]]
    near[talk_from : talk_from + heard.shape[0]] = heard  # [n]
    noise = 10 ** (-70 / 20) * np.random.default_rng(0).standard_normal(n)
    mic = (echo + near + noise).astype(np.float32)  # [n]
    canceller = (canceller_factory or _app_canceller)()
    canceller.set_stream_delay_ms(int(device_delay_ms))
    sent = np.concatenate([canceller.process(mic[i : i + FRAME_SAMPLES], far[i : i + FRAME_SAMPLES])
                           for i in range(0, n, FRAME_SAMPLES)])  # [n]
    talk = slice(talk_from, talk_from + heard.shape[0])
    only_model = np.ones(n, dtype=bool)
    only_model[: int(converge_s * SAMPLE_RATE)] = False
    only_model[talk_from : talk.stop + SAMPLE_RATE // 2] = False
    return {
        "path": ("simulated room, offline: the model's voice reaches the microphone through a "
                 "room impulse response (pyroomacoustics, image-source method) after "
                 f"{device_delay_ms:.0f} ms of device latency, the user's through their own; "
                 "no sound card is involved"),
        "room": room["describe"],
        "erle_db": _erle(mic[only_model], sent[only_model]),
        "double_talk": _double_talk(sent[talk], near[talk], echo[talk]),
        "settings": _settings_of(canceller),
    }


class _EchoTap:
    """frame_tap for the live bench: keeps every (mic, far, sent) frame."""

    def __init__(self) -> None:
        self.raw: list[np.ndarray] = []
        self.far: list[np.ndarray] = []
        self.sent: list[np.ndarray] = []

    def __call__(self, raw: np.ndarray, far: np.ndarray, sent: np.ndarray) -> None:
        self.raw.append(raw.copy())
        self.far.append(far.copy())
        self.sent.append(sent.copy())


def _arrival(raw: np.ndarray, voice: np.ndarray) -> tuple[int, float]:
    """Where `voice` starts in `raw`, and at what gain (cross-correlation peak)."""
    size = 1 << int(np.ceil(np.log2(raw.shape[0] + voice.shape[0])))
    score = np.fft.irfft(np.fft.rfft(raw, size) * np.conj(np.fft.rfft(voice, size)), size)
    start = int(np.argmax(score[: raw.shape[0] - voice.shape[0] + 1]))
    gain = float(score[start]) / float(np.dot(voice, voice))
    return start, gain


def run_live_echo(canceller_factory: CancellerFactory | None = None, seconds: float = 12.0,
                  converge_s: float = 4.0, null_sink: bool = True) -> dict:
    """The app's live audio path: LiveAudio plays the model's voice and cancels its echo from
    what the input device returns, while a second stream plays the user talking over it."""
    voice = speech_like(seconds)  # [n]
    warmup = 25  # frames before the voice starts (PulseAudio prebuffering)
    talk_frame = warmup + int((converge_s + 1.0) * SAMPLE_RATE / FRAME_SAMPLES)
    user = user_speech(seconds - converge_s - 1.5)
    total = warmup + voice.shape[0] // FRAME_SAMPLES + 10
    silence = np.zeros(FRAME_SAMPLES, dtype=np.float32)
    talk = threading.Event()

    def reply(index: int) -> np.ndarray:
        if index >= talk_frame:
            talk.set()  # the user starts talking over the model
        k = index - warmup
        if k < 0 or (k + 1) * FRAME_SAMPLES > voice.shape[0]:
            return silence
        return voice[k * FRAME_SAMPLES : (k + 1) * FRAME_SAMPLES]

    errors: list[str] = []
    ref: list[LiveAudio] = []
    recorder = _Recorder(ref, reply)
    tap = _EchoTap()
    audio = LiveAudio(recorder, errors.append, echo_mode="cancel", frame_tap=tap)
    if canceller_factory is not None:
        audio._canceller = canceller_factory()  # LiveAudio takes a canceller it already has
    ref.append(audio)
    with _loopback(null_sink):
        player = VoicePlayer(user, gate=talk)
        if not audio.start():
            raise RuntimeError(f"audio did not start: {errors}")
        player.start()
        try:
            deadline = time.monotonic() + seconds + 20.0
            while len(recorder.frames) < total and time.monotonic() < deadline and not errors:
                recorder.arrived.wait(0.2)
                recorder.arrived.clear()
        finally:
            player.stop()
        info = {"input": audio.input_name, "output": audio.output_name,
                "counters": audio.counters(), "errors": errors,
                "stream_delay_hint_ms": getattr(audio._canceller, "stream_delay_ms", None)}
        settings = _settings_of(audio._canceller)
        audio.stop()
    return {**_live_report(tap, user, warmup, converge_s, null_sink, info), "settings": settings}


def _live_report(tap: _EchoTap, user: np.ndarray, warmup: int, converge_s: float,
                 null_sink: bool, info: dict) -> dict:
    raw = np.concatenate(tap.raw)  # [frames * 1920]
    sent = np.concatenate(tap.sent)  # [frames * 1920]
    far_power = np.array([float(np.dot(f, f)) for f in tap.far])  # [frames]
    start, gain = _arrival(raw, user)
    end = min(raw.shape[0], start + user.shape[0])
    near = gain * user[: end - start]  # the user as the microphone got them
    frames = np.arange(far_power.shape[0])
    talking = (frames >= start // FRAME_SAMPLES - 1) & (frames <= end // FRAME_SAMPLES + 6)
    measured = ((frames >= warmup + int(converge_s * SAMPLE_RATE / FRAME_SAMPLES))
                & (far_power > 0.0) & ~talking)
    pick = np.repeat(measured, FRAME_SAMPLES)[: raw.shape[0]]
    echo_power = float(np.dot(raw[pick], raw[pick])) / max(1, int(pick.sum()))
    loopback = ({"kind": "digital",
                 "description": "PulseAudio null sink: its monitor returns what was played "
                                "bit for bit (no speaker, no room, no microphone), so this "
                                "is the best case for any canceller"}
                if null_sink else
                {"kind": "acoustic",
                 "description": "the system's default devices: speaker, room, microphone "
                                "(the user's voice comes from the same speaker)"})
    return {
        "loopback": loopback,
        "erle_db": _erle(raw[pick], sent[pick]),
        "frames_measured": int(measured.sum()),
        "echo_level_dbfs": _db(echo_power),
        "double_talk": {**_double_talk(sent[start:end], near, raw[start:end] - near),
                        "user_arrived_at_frame": start // FRAME_SAMPLES,
                        "user_gain_at_mic": round(gain, 3)},
        "devices": info,
    }


def run_echo_bench(seconds: float = 12.0, converge_s: float = 4.0, null_sink: bool = True,
                   canceller_factory: CancellerFactory | None = None, room: bool = True
                   ) -> dict:
    """The echo canceller with the model talking alone (ERLE) and with the user talking over
    it (near-end preservation), on the live audio path and in a simulated room."""
    if seconds < converge_s + 3.0:
        raise ValueError(f"--seconds must be at least {converge_s + 3.0:g} (the canceller "
                         f"converges for {converge_s:g} s, then the user talks over the model)")
    result: dict = {
        "canceller": ("app.audio.echo_canceller.EchoCanceller (WebRTC AEC3)"
                      if canceller_factory is None
                      else getattr(canceller_factory, "__name__", repr(canceller_factory))),
        "signal": "espeak-ng" if shutil.which("espeak-ng") else "synthetic voiced",
        "live": run_live_echo(canceller_factory, seconds, converge_s, null_sink),
    }
    if room:
        try:
            result["simulated_room"] = run_room_echo(canceller_factory, seconds, converge_s)
        except RuntimeError as exc:
            result["simulated_room"] = {"error": str(exc)}
    result["includes"] = ECHO_INCLUDES
    return result


ECHO_INCLUDES = {
    "erle_db": "echo return loss enhancement: the microphone's power over the power of what "
               "the canceller sends on, over frames where only the model talks, after "
               "`converge_s` seconds; a canceller that mutes scores highest here, so read it "
               "beside near_end_preservation",
    "double_talk.near_end_preservation": "share of the user's speech energy (as it reached the "
               "microphone) still in what the canceller sends on while the model talks over "
               "them: 1 all kept, 0 muted; measured through the best 43 ms causal linear "
               "filter, so the canceller's own delay and filters do not count as loss",
    "double_talk.other_than_user_db": "energy of everything else the canceller sends on during "
               "double talk (echo left, noise, distortion of the user's voice), relative to "
               "the user's speech",
    "double_talk.echo_reduction_db": "the echo's energy at the microphone during double talk "
               "over that of everything else sent on (an upper bound on echo left: it counts "
               "noise and distortion of the user's voice as echo)",
    "double_talk.user_to_echo_db": "the user's speech over the model's echo at the microphone "
               "during double talk (live: the microphone minus the user's voice, located by "
               "cross-correlation)",
    "echo_level_dbfs": "mean power of the raw microphone over the frames ERLE is measured on",
    "settings": "the canceller as it ran: the linear echo filter before AEC3 (null: AEC3 alone), "
               "the APM's switches, the stream delay hint it was told, its chunk and frame sizes",
    "live.loopback.kind": "digital: the null sink returns the played samples exactly (no "
               "acoustics); acoustic: real devices in a room",
    "simulated_room": "no sound card: speech convolved with simulated room impulse responses, "
               "the same canceller class LiveAudio runs, in the same 80 ms frames",
}
