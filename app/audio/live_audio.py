"""Live capture and playback: the microphone feeds the engine, the engine's frames feed the
speaker, and neither side ever waits for the other.

Threads and why:
- PortAudio's capture callback slices the mic into 1920-sample frames (80 ms at 24 kHz),
  runs the echo canceller, and hands each frame to `on_frame` (the pipeline's
  `push_frame(frame, 0.0)`, which drops rather than blocks). Buffers are preallocated; the
  only allocation per frame is the copy handed to `on_frame` (7.5 KB), because the engine
  queues the array it receives.
- PortAudio's playback callback pulls from a `JitterBuffer`, which `play()` fills with the
  model's frames from whatever thread routes engine events. What it plays is also written to
  a reference ring, the echo canceller's far end.
- A supervisor thread turns stream failures (a PortAudio error, a callback that raised, a
  stream that finished on its own, callbacks that stopped coming because the device was
  unplugged) into one `on_error(message)` call, after closing the streams. The app pauses the
  conversation and shows the message; `start()` may be called again later.

Sample rate: the streams open at 24 kHz mono when the device accepts it (PulseAudio and most
USB headsets do), else at the device's default rate with `StreamingResampler` (LiveKit's
streaming resampler, which keeps its filter state across callbacks; `sphn.resample` works on
whole signals only and would click at every block edge).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt
import sounddevice as sd

from app.audio.devices import ResolvedDevice, listed_now, resolve_device
from app.audio.jitter_buffer import JitterBuffer
from app.audio.resampler import StreamingResampler
from app.frames import FRAME_SAMPLES, SAMPLE_RATE
from app.settings.schema import EchoMode

LEVEL_FLOOR_DB = -100.0
REFERENCE_SLACK = 960  # 40 ms: callback jitter tolerated before the far end is re-aligned

FrameSink = Callable[[np.ndarray], object]  # returns False when the frame was dropped
FrameTap = Callable[[np.ndarray, np.ndarray, np.ndarray], None]  # (mic, far reference, sent)


class Canceller(Protocol):
    """What LiveAudio asks of an echo canceller (app.audio.echo_canceller.EchoCanceller,
    or a bench's)."""

    def process(self, near: np.ndarray, far: np.ndarray, out: np.ndarray | None = None
                ) -> np.ndarray: ...

    def set_stream_delay_ms(self, delay_ms: int) -> None: ...


def rms_dbfs(samples: np.ndarray) -> float:
    """RMS level in dB relative to full scale (a full-scale sine is -3 dBFS)."""
    if samples.size == 0:
        return LEVEL_FLOOR_DB
    mean_square = float(np.dot(samples, samples)) / samples.size
    if mean_square <= 1e-10:
        return LEVEL_FLOOR_DB
    return max(LEVEL_FLOOR_DB, 10.0 * math.log10(mean_square))


@dataclass(frozen=True)
class AudioCounters:
    frames_captured: int  # 1920-sample frames handed to on_frame
    dropped: int  # frames on_frame refused (its queue was full)
    underruns: int  # times the speaker ran dry (played silence)
    overruns: int  # times play() overfilled the jitter buffer (oldest audio dropped)
    input_overflows: int  # PortAudio status flags seen by the callbacks
    input_underflows: int
    output_underflows: int
    output_overflows: int
    jitter_fill: int  # samples queued for the speaker now


class _Flags:
    """Mutable counters touched only by the callbacks (ints: atomic under the GIL)."""

    def __init__(self) -> None:
        self.frames_captured = 0
        self.dropped_frames = 0
        self.input_overflows = 0
        self.input_underflows = 0
        self.output_underflows = 0
        self.output_overflows = 0


def _present(device: ResolvedDevice, label: str, wanted: bool) -> ResolvedDevice:
    """The device, or a plain error when the machine has none of that kind (PortAudio's own
    message for it is "Error querying device -1")."""
    if wanted and device.index is None and not device.name:
        raise NoAudioDevice(f"no {label} was found on this computer")
    return device


class NoAudioDevice(RuntimeError):
    """The machine has no input (or no output) device at all."""


def _pick_rate(device: int | None, kind: str, forced: int | None) -> int:
    """24 kHz when the device takes it, else the device's own default rate."""
    if forced:
        return forced
    check = sd.check_input_settings if kind == "input" else sd.check_output_settings
    try:
        check(device=device, samplerate=SAMPLE_RATE, channels=1, dtype="float32")
        return SAMPLE_RATE
    except (sd.PortAudioError, ValueError):
        return int(sd.query_devices(device, kind)["default_samplerate"])


class LiveAudio:
    """Mic -> `on_frame` (1920-sample float32 frames), `play()` -> speaker, with echo
    cancellation in between. start()/stop() may be called any number of times."""

    def __init__(
        self,
        on_frame: FrameSink | None = None,
        on_error: Callable[[str], None] | None = None,
        *,
        input_device: str | None = None,
        output_device: str | None = None,
        echo_mode: EchoMode = "cancel",
        device_rate: int | None = None,  # force a device rate (tests the resampling path)
        block_ms: int = 20,
        latency: str | float = "low",
        jitter_target_frames: float = 2.0,
        jitter_capacity_frames: int = 8,
        stall_timeout_s: float = 2.0,
        frame_tap: FrameTap | None = None,
        capture: bool = True,
        playback: bool = True,
    ) -> None:
        """`capture`/`playback` False: open only the other stream (a machine without a
        microphone or without a speaker; `only()` makes such a copy)."""
        self.on_frame = on_frame
        self.on_error = on_error
        self.input_device = input_device
        self.output_device = output_device
        self.echo_mode: EchoMode = echo_mode
        self.device_rate = device_rate
        self.block_ms = block_ms
        self.latency = latency
        self.stall_timeout_s = stall_timeout_s
        # PulseAudio prebuffers a new playback stream for ~1-2 s before the clocks run.
        self.start_grace_s = 5.0
        self.frame_tap = frame_tap
        self.capture, self.playback = capture, playback
        self._echo_delay_ms: int | None = None
        self.muted = False  # read by the capture callback: muted frames are sent as silence
        self.jitter = JitterBuffer(jitter_capacity_frames * FRAME_SAMPLES,
                                   int(jitter_target_frames * FRAME_SAMPLES))
        # The far end as played, at 24 kHz; bounded so the echo path delay stays bounded.
        self._reference = JitterBuffer(4 * FRAME_SAMPLES, 0)
        # Created on first start in "cancel" mode (imports livekit).
        self._canceller: Canceller | None = None
        self._frame = np.zeros(FRAME_SAMPLES, dtype=np.float32)  # [1920] capture accumulator
        self._frame_fill = 0
        self._far = np.zeros(FRAME_SAMPLES, dtype=np.float32)  # [1920]
        self._clean = np.zeros(FRAME_SAMPLES, dtype=np.float32)  # [1920]
        self._silence = np.zeros(FRAME_SAMPLES, dtype=np.float32)  # [1920]
        self._pull = np.zeros(SAMPLE_RATE // 100, dtype=np.float32)  # [240] resampled playback
        # device-rate playback samples
        self._out_fifo: npt.NDArray[np.float32] = np.zeros(8192, dtype=np.float32)
        self._out_fill = 0
        self._in_resampler: StreamingResampler | None = None
        self._out_resampler: StreamingResampler | None = None
        self._flags = _Flags()
        self._mic_db = LEVEL_FLOOR_DB
        self._speaker_db = LEVEL_FLOOR_DB
        self._streams: list[sd._StreamBase] = []
        self._life = threading.Lock()
        self._stopping = threading.Event()
        self._error: str | None = None
        self._last_capture = self._last_playback = 0.0  # monotonic time of the last callback
        self._supervisor: threading.Thread | None = None
        self.warnings: tuple[str, ...] = ()
        # What the last failure was: "stall" (callbacks stopped, the devices still listed),
        # "unplugged" (a device gone from the list), "failed" (anything else); "" none yet.
        self.failure = ""
        self.input_name = ""
        self.output_name = ""
        self.input_rate = SAMPLE_RATE
        self.output_rate = SAMPLE_RATE

    # ---- any thread ----------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return bool(self._streams) and all(s.active for s in self._streams)

    @property
    def mic_level_db(self) -> float:
        """Level of the raw mic (before mute and echo cancellation), dBFS."""
        return self._mic_db

    @property
    def speaker_level_db(self) -> float:
        """Level of what is being played, dBFS."""
        return self._speaker_db

    def levels(self) -> tuple[float, float]:
        """(mic, speaker) levels in dBFS."""
        return self._mic_db, self._speaker_db

    def counters(self) -> dict[str, int]:
        """The counters as plain data for the status bar (keys: AudioCounters' fields)."""
        return asdict(self.snapshot())

    def snapshot(self) -> AudioCounters:
        f = self._flags
        return AudioCounters(
            frames_captured=f.frames_captured,
            dropped=f.dropped_frames,
            underruns=self.jitter.underruns,
            overruns=self.jitter.overruns,
            input_overflows=f.input_overflows,
            input_underflows=f.input_underflows,
            output_underflows=f.output_underflows,
            output_overflows=f.output_overflows,
            jitter_fill=self.jitter.fill,
        )

    def play(self, frame: np.ndarray) -> None:
        """Queue one of the model's frames ([1920] float32) for the speaker; never waits."""
        if self.playback:  # without a speaker the model's audio is dropped
            self.jitter.write(frame)

    def only(self, kind: str) -> LiveAudio:
        """A copy (not started) that opens only the "input" or only the "output" stream."""
        return LiveAudio(self.on_frame, None, input_device=self.input_device,
                         output_device=self.output_device, echo_mode=self.echo_mode,
                         device_rate=self.device_rate, block_ms=self.block_ms,
                         latency=self.latency, stall_timeout_s=self.stall_timeout_s,
                         frame_tap=self.frame_tap, capture=kind == "input",
                         playback=kind == "output")

    def set_echo_mode(self, mode: EchoMode) -> None:
        """Switch echo cancellation on or off while the streams run (settings changed)."""
        if mode == "cancel" and self._canceller is None and self.capture and self.playback:
            from app.audio.echo_canceller import EchoCanceller

            canceller = EchoCanceller()
            if self._echo_delay_ms is not None:
                canceller.set_stream_delay_ms(self._echo_delay_ms)
            self._canceller = canceller  # before the mode: the callback reads both
        self.echo_mode = mode

    def start(self, on_frame: FrameSink | None = None) -> bool:
        """Open and start both streams (optionally with a new `on_frame`). Returns False,
        after calling on_error, when the devices cannot be opened."""
        error: str | None = None
        with self._life:
            if on_frame is not None:
                self.on_frame = on_frame
            if self._streams:
                return True
            try:
                self._open()
            except Exception as exc:  # PortAudioError, ValueError for a bad device, ...
                self._close_streams(2.0)
                error = f"could not open the audio devices: {exc}"
        if error is not None:
            self._report(error)
            return False
        return True

    def stop(self, timeout: float = 5.0) -> bool:
        """Stop and close both streams. Returns True when everything ended within timeout."""
        with self._life:
            ok = self._close_streams(timeout)
        supervisor = self._supervisor
        if supervisor is not None and supervisor is not threading.current_thread():
            supervisor.join(timeout)
            ok = ok and not supervisor.is_alive()
        return ok

    # ---- lifecycle -----------------------------------------------------------------------

    def _open(self) -> None:
        inp = _present(resolve_device(self.input_device, "input"), "microphone",
                       self.capture)
        out = _present(resolve_device(self.output_device, "output"), "speaker",
                       self.playback)
        self.warnings = tuple(w for w in (inp.warning, out.warning) if w)
        self.input_name, self.output_name = inp.name, out.name
        self.input_rate = (_pick_rate(inp.index, "input", self.device_rate) if self.capture
                           else SAMPLE_RATE)
        self.output_rate = (_pick_rate(out.index, "output", self.device_rate) if self.playback
                            else SAMPLE_RATE)
        self._in_resampler = (StreamingResampler(self.input_rate, SAMPLE_RATE)
                              if self.input_rate != SAMPLE_RATE else None)
        self._out_resampler = (StreamingResampler(SAMPLE_RATE, self.output_rate)
                               if self.output_rate != SAMPLE_RATE else None)
        self._reset_state()
        self._stopping.clear()
        capture = playback = None
        if self.capture:
            capture = sd.InputStream(
                samplerate=self.input_rate, blocksize=self.input_rate * self.block_ms // 1000,
                device=inp.index, channels=1, dtype="float32", latency=self.latency,
                callback=self._capture_callback,
                finished_callback=lambda: self._finished("microphone"),
            )
            self._streams.append(capture)
        if self.playback:
            playback = sd.OutputStream(
                samplerate=self.output_rate, blocksize=self.output_rate * self.block_ms // 1000,
                device=out.index, channels=1, dtype="float32", latency=self.latency,
                callback=self._playback_callback,
                finished_callback=lambda: self._finished("speaker"),
            )
            self._streams.append(playback)
        if capture is not None and playback is not None:  # no echo without both
            self._echo_delay_ms = round((capture.latency + playback.latency) * 1000)
            if self.echo_mode == "cancel" and self._canceller is None:
                from app.audio.echo_canceller import EchoCanceller

                self._canceller = EchoCanceller()
            if self._canceller is not None:
                self._canceller.set_stream_delay_ms(self._echo_delay_ms)
        self._last_capture = self._last_playback = time.monotonic()
        for stream in (playback, capture):
            if stream is not None:
                stream.start()
        self._supervisor = threading.Thread(target=self._supervise, name="live-audio-supervisor",
                                            daemon=True)
        self._supervisor.start()

    def _reset_state(self) -> None:
        self.jitter.clear()
        self.jitter.underruns = self.jitter.overruns = self.jitter.dropped_samples = 0
        self._reference.clear()
        self._frame_fill = 0
        self._out_fill = 0
        self._flags = _Flags()
        self._error = None
        self._mic_db = self._speaker_db = LEVEL_FLOOR_DB

    def _close_streams(self, timeout: float) -> bool:
        """Abort and close the streams on a helper thread, so a hung driver cannot hang us."""
        self._stopping.set()
        streams, self._streams = self._streams, []
        if not streams:
            return True

        def close() -> None:
            for stream in streams:
                try:
                    stream.abort(ignore_errors=True)
                    stream.close(ignore_errors=True)
                except Exception:  # a dying device may fail to close; nothing to do
                    pass

        closer = threading.Thread(target=close, name="live-audio-close", daemon=True)
        closer.start()
        closer.join(timeout)
        return not closer.is_alive()

    def _finished(self, which: str) -> None:
        """PortAudio's finished_callback: unexpected unless we are stopping."""
        if not self._stopping.is_set() and self._error is None:
            self._error = f"the {which} stream stopped (device unplugged or failed)"

    def _report(self, message: str) -> None:
        if self.on_error is not None:
            self.on_error(message)

    def _supervise(self) -> None:
        """Watch the streams; on failure close them and report once."""
        while not self._stopping.wait(0.1):
            message = self._error
            quiet = False  # the callbacks stopped coming (not a stream's error)
            if message is None:
                streams = self._streams
                if streams and not all(s.active for s in streams):
                    message = "an audio stream stopped (device unplugged or failed)"
                elif (time.monotonic() - self._last_callback()
                      > self.stall_timeout_s + (0.0 if self._flags.frames_captured
                                                else self.start_grace_s)):
                    message = (f"no audio callbacks for {self.stall_timeout_s:.1f} s "
                               "(device unplugged or hung)")
                    quiet = True
            if message is not None:
                stalled_for = time.monotonic() - self._last_callback()
                with self._life:
                    if self._stopping.is_set():  # stop() won the race: not an error
                        return
                    self._close_streams(2.0)
                if quiet:  # a stall or an unplug: the device list tells them apart
                    message = self._stall_or_unplug(stalled_for)
                else:
                    self.failure = "failed"
                self._report(message)
                return

    def _stall_or_unplug(self, stalled_for: float) -> str:
        """Callbacks stopped coming: a device that is gone from the list was unplugged; one
        still listed stalled (a loaded machine delays the callbacks, or its driver hung)."""
        listed = listed_now()
        opened = [(label, name, names) for label, name, names, used in (
            ("microphone", self.input_name, listed[0] if listed else [], self.capture),
            ("speaker", self.output_name, listed[1] if listed else [], self.playback))
            if used and name]
        if listed is None or not opened:
            self.failure = "failed"
            return (f"no audio callbacks for {stalled_for:.1f} s, and the device list could "
                    "not be read (device unplugged or hung)")
        gone = [f"the {label} “{name}”" for label, name, names in opened if name not in names]
        if gone:
            self.failure = "unplugged"
            return f"{' and '.join(gone)} {'is' if len(gone) == 1 else 'are'} no longer " \
                   "connected (unplugged)"
        self.failure = "stall"
        what = " and ".join(f"the {label} “{name}”" for label, name, _ in opened)
        return (f"the audio stalled: no callbacks for {stalled_for:.1f} s while {what} "
                f"{'is' if len(opened) == 1 else 'are'} still connected (the computer is "
                "too busy, or the audio driver hung)")

    def _last_callback(self) -> float:
        """The older of the open streams' last callbacks (monotonic)."""
        times = [t for t, on in ((self._last_capture, self.capture),
                                 (self._last_playback, self.playback)) if on]
        return min(times) if times else time.monotonic()

    # ---- PortAudio callbacks (real-time: no waits, no big allocations) ---------------------

    def _capture_callback(self, indata: np.ndarray, frames: int, _time: object,
                          status: sd.CallbackFlags) -> None:
        # indata: [frames, 1] float32 at the input device rate
        self._last_capture = time.monotonic()
        if status:
            self._flags.input_overflows += bool(status.input_overflow)
            self._flags.input_underflows += bool(status.input_underflow)
        try:
            mic = indata[:, 0]
            self._mic_db = rms_dbfs(mic)
            if self._in_resampler is not None:
                mic = self._in_resampler.process(mic)
            self._slice_frames(mic)
        except Exception as exc:
            self._error = f"microphone processing failed: {type(exc).__name__}: {exc}"
            raise sd.CallbackAbort from exc

    def _slice_frames(self, mic: np.ndarray) -> None:
        """Accumulate 24 kHz samples; every full 1920-sample frame goes out."""
        pos = 0
        while pos < mic.shape[0]:
            take = min(FRAME_SAMPLES - self._frame_fill, mic.shape[0] - pos)
            self._frame[self._frame_fill : self._frame_fill + take] = mic[pos : pos + take]
            self._frame_fill += take
            pos += take
            if self._frame_fill == FRAME_SAMPLES:
                self._frame_fill = 0
                self._deliver(self._frame)

    def _deliver(self, raw: np.ndarray) -> None:
        near = self._silence if self.muted else raw
        # The far end for this frame: the newest 80 ms handed to the speaker. Its echo can only
        # come later (device latency), so the canceller sees a causal, short echo path. A
        # backlog (capture stalled while playback ran, e.g. at start) is dropped, not kept as
        # delay: an echo that arrived before its reference could never be cancelled.
        backlog = self._reference.fill - FRAME_SAMPLES
        if backlog > REFERENCE_SLACK:
            self._reference.discard(backlog)
        self._reference.read_into(self._far)  # [1920], zeros where nothing was played
        sent = near
        if self.echo_mode == "cancel" and self._canceller is not None:
            sent = self._canceller.process(near, self._far, self._clean)
        if self.frame_tap is not None:
            self.frame_tap(raw, self._far, sent)
        self._flags.frames_captured += 1
        sink = self.on_frame
        if sink is not None and sink(sent.copy()) is False:  # a copy: the consumer queues the array
            self._flags.dropped_frames += 1

    def _playback_callback(self, outdata: np.ndarray, frames: int, _time: object,
                           status: sd.CallbackFlags) -> None:
        # outdata: [frames, 1] float32 at the output device rate
        self._last_playback = time.monotonic()
        if status:
            self._flags.output_underflows += bool(status.output_underflow)
            self._flags.output_overflows += bool(status.output_overflow)
        try:
            out = outdata[:, 0]
            if self._out_resampler is None:
                self.jitter.read_into(out)
                self._reference.write(out)
                self._speaker_db = rms_dbfs(out)
                return
            while self._out_fill < frames:  # pull 10 ms at a time at 24 kHz, resample
                self.jitter.read_into(self._pull)
                self._reference.write(self._pull)
                self._speaker_db = rms_dbfs(self._pull)
                resampled = self._out_resampler.process(self._pull)
                end = self._out_fill + resampled.shape[0]
                if end > self._out_fifo.shape[0]:
                    self._out_fifo = np.concatenate([self._out_fifo, np.zeros_like(self._out_fifo)])
                self._out_fifo[self._out_fill : end] = resampled
                self._out_fill = end
            out[:] = self._out_fifo[:frames]
            rest = self._out_fill - frames
            self._out_fifo[:rest] = self._out_fifo[frames : self._out_fill]
            self._out_fill = rest
        except Exception as exc:
            self._error = f"speaker processing failed: {type(exc).__name__}: {exc}"
            raise sd.CallbackAbort from exc
