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
- echo: speech is played, the monitor's copy is cancelled with the played frames as the far
  end, and the echo return loss enhancement (raw echo power over what is left) is reported
  after the canceller has converged.
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
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

import numpy as np

from app.audio.live_audio import FRAME_SAMPLES, SAMPLE_RATE, LiveAudio, StreamingResampler

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

    def __init__(self, audio_ref: list[LiveAudio], reply: object) -> None:
        self.frames: list[np.ndarray] = []
        self.arrived = threading.Event()
        self._audio_ref = audio_ref
        self._reply = reply

    def __call__(self, frame: np.ndarray) -> bool:
        index = len(self.frames)
        self.frames.append(frame)
        self._audio_ref[0].play(self._reply(index))  # type: ignore[operator]
        self.arrived.set()
        return True


def _run_live(reply: object, frames: int, echo_mode: str, timeout_s: float,
              null_sink: bool) -> tuple[list[np.ndarray], dict]:
    """Run LiveAudio until `frames` frames were captured (bounded by timeout_s)."""
    errors: list[str] = []
    ref: list[LiveAudio] = []
    recorder = _Recorder(ref, reply)
    audio = LiveAudio(recorder, errors.append, echo_mode=echo_mode)  # type: ignore[arg-type]
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
    from app.engine.duplex_engine import DuplexEngine, EngineOptions
    from app.engine.events import AudioOut, EngineReady

    manifest = get_manifest("tiny")
    checkpoint = load_checkpoint(manifest, ensure_built(manifest), "cpu")
    events: queue.SimpleQueue = queue.SimpleQueue()
    engine = DuplexEngine(checkpoint, EngineOptions(seed=0, chunk_limit=1), events)
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


def speech_like(seconds: float, seed: int = 0) -> np.ndarray:
    """Speech for the echo bench: espeak-ng when installed, else a synthetic voiced signal
    (a gliding harmonic source with syllable-rate bursts). [n] float32 at 24 kHz."""
    n = int(seconds * SAMPLE_RATE)
    espeak = shutil.which("espeak-ng")
    if espeak is not None:
        text = ("The capital of Australia is Canberra. It was chosen as a compromise between "
                "Sydney and Melbourne, and it became the seat of government in nineteen "
                "twenty seven. Would you like to hear more about its history?")
        out = subprocess.run([espeak, "-v", "en-us", "-s", "160", "--stdout", text],
                             capture_output=True, timeout=30)
        if out.returncode == 0 and out.stdout:
            with tempfile.NamedTemporaryFile(suffix=".wav") as tmp:
                tmp.write(out.stdout)
                tmp.flush()
                with wave.open(tmp.name) as wav:
                    rate = wav.getframerate()
                    pcm = np.frombuffer(wav.readframes(wav.getnframes()), dtype=np.int16)
            voice = pcm.astype(np.float32) / 32768.0
            if rate != SAMPLE_RATE:
                voice = StreamingResampler(rate, SAMPLE_RATE).process(voice)
            voice = 0.5 * voice / max(1e-6, float(np.max(np.abs(voice))))
            return np.resize(voice, n).astype(np.float32)
    rng = np.random.default_rng(seed)
    t = np.arange(n) / SAMPLE_RATE
    f0 = 110 + 40 * np.sin(2 * np.pi * 0.3 * t) + 10 * rng.standard_normal() * np.sin(7 * t)
    phase = np.cumsum(2 * np.pi * f0 / SAMPLE_RATE)
    source = sum(np.sin(k * phase) / k for k in range(1, 30))
    syllables = np.clip(np.sin(2 * np.pi * 4.0 * t), 0, None) ** 2
    return (0.3 * source * syllables / np.max(np.abs(source))).astype(np.float32)


def run_echo_bench(seconds: float = 12.0, converge_s: float = 4.0, null_sink: bool = True
                   ) -> dict:
    """ERLE (dB) of the live echo canceller: the model's own voice, played and recorded."""
    voice = speech_like(seconds)
    warmup = 25  # frames before the voice starts (PulseAudio prebuffering)
    silence = np.zeros(FRAME_SAMPLES, dtype=np.float32)
    total = warmup + voice.shape[0] // FRAME_SAMPLES
    pairs: list[tuple[float, float, float]] = []  # (raw power, far power, cleaned power)

    def reply(index: int) -> np.ndarray:
        k = index - warmup
        if k < 0 or (k + 1) * FRAME_SAMPLES > voice.shape[0]:
            return silence
        return voice[k * FRAME_SAMPLES : (k + 1) * FRAME_SAMPLES]

    def tap(raw: np.ndarray, far: np.ndarray, sent: np.ndarray) -> None:
        pairs.append((float(np.dot(raw, raw)), float(np.dot(far, far)), float(np.dot(sent, sent))))

    errors: list[str] = []
    ref: list[LiveAudio] = []
    recorder = _Recorder(ref, reply)
    audio = LiveAudio(recorder, errors.append, echo_mode="cancel", frame_tap=tap)
    ref.append(audio)
    with _loopback(null_sink):
        if not audio.start():
            raise RuntimeError(f"audio did not start: {errors}")
        deadline = time.monotonic() + seconds + 20.0
        while len(recorder.frames) < total and time.monotonic() < deadline and not errors:
            recorder.arrived.wait(0.2)
            recorder.arrived.clear()
        info = {"input": audio.input_name, "output": audio.output_name,
                "counters": audio.counters(), "errors": errors,
                "stream_delay_hint_ms": getattr(audio._canceller, "stream_delay_ms", None)}
        audio.stop()
    first = warmup + int(converge_s * SAMPLE_RATE / FRAME_SAMPLES)
    after = [p for p in pairs[first:] if p[1] > 0.0]  # frames while the far end speaks
    raw = sum(p[0] for p in after)
    cleaned = sum(p[2] for p in after)
    erle = 10.0 * np.log10(max(raw, 1e-12) / max(cleaned, 1e-12)) if after else None
    return {"erle_db": None if erle is None else float(erle), "frames_measured": len(after),
            "echo_level_dbfs": (10.0 * math.log10(raw / len(after) / FRAME_SAMPLES + 1e-12)
                                if after else None),
            "signal": "espeak-ng" if shutil.which("espeak-ng") else "synthetic voiced",
            "devices": info}
