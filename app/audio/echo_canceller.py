"""Acoustic echo cancellation for open speakers: the model must not hear its own voice.

Over open speakers the microphone picks up what the model says; a full-duplex model then
takes its own voice for the user's and talks over itself. The canceller subtracts an adaptive
estimate of that echo from each captured frame, using the frames actually played as the
far-end reference.

Why livekit's `rtc.AudioProcessingModule`: it is a maintained binding of WebRTC's audio
processing module (AEC3, the canceller in every browser), shipped as binary wheels for
Linux, macOS and Windows, so nothing is compiled on the user's machine. It takes 10 ms int16
frames at any common rate, 24 kHz mono included, and works offline (no room, no network).
Measured on this project's test machine: with espeak-ng speech, a 40 ms delay, a 3-tap room
response and light noise it removed about 40 dB after converging (see
`python main.py bench echo` for the live loopback number).

Heard while it speaks: AEC3's suppressor alone kept 15 % of a user's speech energy in the
simulated room while the model talked (its residual-echo estimate assumes its linear filter
removed at most 6 dB, so a user quieter than the echo is suppressed with it). A linear echo
filter of our own runs first (app.audio.linear_echo_filter: it only subtracts, so it cannot
remove the user), and AEC3 gets a microphone whose echo is already 20-25 dB down: 60 % kept,
ERLE above 30 dB (`python main.py bench echo` prints the settings beside the numbers).
Measured and ruled out as causes (each moved preservation by 0.02 at most): the stream delay
hint (none, 0, 40 or 100 ms: AEC3 finds the delay itself), the high-pass filter, the APM at
16, 32 or 48 kHz instead of 24, all far chunks of a frame fed first, and the room's
reverberation (cut to 10 ms, still 14 %). Noise suppression on: 13 %. AGC on reads 70 % only
because it amplifies (ERLE falls to 33 dB) and it moves the level the ASR hears: kept off.
The linear filter covers 200 ms from the reference, so a device latency beyond ~150 ms leaves
AEC3 alone, as before.

Shapes: the app works in 1920-sample float32 frames (80 ms at 24 kHz); the APM in 240-sample
int16 chunks (10 ms). One frame is 8 chunks; each chunk's reverse (far) half is processed
before its near half, which is how WebRTC expects the two streams to interleave.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np
from livekit import rtc

from app.audio.linear_echo_filter import LinearEchoFilter, LinearEchoSettings
from app.frames import FRAME_SAMPLES, SAMPLE_RATE

CHUNK_SAMPLES = SAMPLE_RATE // 100  # 240: the APM's 10 ms
CHUNKS_PER_FRAME = FRAME_SAMPLES // CHUNK_SAMPLES  # 8


@dataclass(frozen=True)
class EchoCancellerSettings:
    """How the canceller is built; `bench echo` prints it beside its numbers."""

    linear: LinearEchoSettings = field(default_factory=LinearEchoSettings)  # span 0: AEC3 alone
    high_pass_filter: bool = True  # removes DC and rumble, which AEC3 models poorly
    noise_suppression: bool = False  # the speech model hears better without it
    auto_gain_control: bool = False  # level changes would look like echo path changes


class EchoCanceller:
    """A linear echo filter, then WebRTC AEC3, on 1920-sample frames. One instance per capture
    stream (not thread-safe: the capture thread alone calls `process`)."""

    def __init__(self, stream_delay_ms: int | None = None,
                 settings: EchoCancellerSettings = EchoCancellerSettings()) -> None:
        self.settings = settings
        self._apm = rtc.AudioProcessingModule(
            echo_cancellation=True,
            noise_suppression=settings.noise_suppression,
            high_pass_filter=settings.high_pass_filter,
            auto_gain_control=settings.auto_gain_control,
        )
        if settings.linear.block_samples != CHUNK_SAMPLES:
            raise ValueError(f"the linear filter works in the APM's {CHUNK_SAMPLES}-sample chunks")
        self._linear = LinearEchoFilter(settings.linear) if settings.linear.partitions else None
        # Preallocated int16 chunk buffers wrapped once in AudioFrames: the APM works in place
        # on their memory, so each call costs no allocation.
        self._near_bytes = bytearray(CHUNK_SAMPLES * 2)
        self._far_bytes = bytearray(CHUNK_SAMPLES * 2)
        self._near = np.frombuffer(self._near_bytes, dtype=np.int16)  # [240]
        self._far = np.frombuffer(self._far_bytes, dtype=np.int16)  # [240]
        self._near_frame = rtc.AudioFrame(self._near_bytes, SAMPLE_RATE, 1, CHUNK_SAMPLES)
        self._far_frame = rtc.AudioFrame(self._far_bytes, SAMPLE_RATE, 1, CHUNK_SAMPLES)
        self._scratch = np.zeros(CHUNK_SAMPLES, dtype=np.float32)  # [240]
        self.stream_delay_ms: int | None = None
        if stream_delay_ms is not None:
            self.set_stream_delay_ms(stream_delay_ms)

    def set_stream_delay_ms(self, delay_ms: int) -> None:
        """Hint of the render-to-capture delay; AEC3 also estimates it itself."""
        setter = getattr(self._apm, "set_stream_delay_ms", None)
        if setter is not None:
            setter(int(max(0, delay_ms)))
            self.stream_delay_ms = int(max(0, delay_ms))

    def describe(self) -> dict:
        """The settings in force, for a bench report."""
        linear = self.settings.linear
        return {
            "aec": "WebRTC AEC3 (livekit rtc.AudioProcessingModule, its default tuning)",
            "linear_prefilter": ({**asdict(linear), "partitions": linear.partitions,
                                  "kind": "two-path partitioned-block frequency-domain NLMS"}
                                 if self._linear is not None else None),
            "high_pass_filter": self.settings.high_pass_filter,
            "noise_suppression": self.settings.noise_suppression,
            "auto_gain_control": self.settings.auto_gain_control,
            "stream_delay_hint_ms": self.stream_delay_ms,
            "chunk_samples": CHUNK_SAMPLES,
            "frame_samples": FRAME_SAMPLES,
            "sample_rate": SAMPLE_RATE,
        }

    def process(self, near: np.ndarray, far: np.ndarray, out: np.ndarray | None = None
                ) -> np.ndarray:
        """Cancel the echo of `far` (what was played, [1920]) from `near` (the mic, [1920]).

        Returns the cleaned frame ([1920] float32), written into `out` when given.
        """
        if near.shape != (FRAME_SAMPLES,) or far.shape != (FRAME_SAMPLES,):
            raise ValueError(f"frames are {FRAME_SAMPLES} samples: {near.shape}, {far.shape}")
        if out is None:
            out = np.empty(FRAME_SAMPLES, dtype=np.float32)
        for i in range(CHUNKS_PER_FRAME):
            part = slice(i * CHUNK_SAMPLES, (i + 1) * CHUNK_SAMPLES)
            self._quantize(far[part], self._far)
            self._apm.process_reverse_stream(self._far_frame)
            if self._linear is None:
                self._quantize(near[part], self._near)
            else:  # the echo AEC3 is shown is 20-25 dB down: its suppressor spares the user
                self._quantize(self._linear.process_block(near[part], far[part]), self._near)
            self._apm.process_stream(self._near_frame)
            np.multiply(self._near, 1.0 / 32768.0, out=out[part], casting="unsafe")
        return out

    def _quantize(self, src: np.ndarray, dst: np.ndarray) -> None:
        """float32 [-1, 1] -> int16 in place, through a preallocated scratch buffer."""
        np.multiply(src, 32767.0, out=self._scratch)
        np.clip(self._scratch, -32768.0, 32767.0, out=self._scratch)
        np.rint(self._scratch, out=self._scratch)
        dst[:] = self._scratch
