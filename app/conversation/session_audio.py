"""The desktop conversation's audio devices, from opening them to losing them and back.

Text always works. Without a microphone the model hears silence at a microphone's pace
(`SilentMicrophone`), without a speaker its audio is dropped: typed questions are answered,
"Read this" lands, the model's words are shown. Losing a device mid-conversation falls into
the same mode ("paused": Resume opens the devices again); a stall (the callbacks late on a
busy machine, the devices still there) reopens them by itself a moment later, a few times a
minute (audio_stalls.py).

The session (session.py) owns one `SessionAudio` and calls it from its own thread, but for
`play` (the pipeline's router thread: the model's voice never waits on the session),
`set_muted` (the GUI thread) and a device's failure, which its callback reports from the
audio's thread: the session hears of it through its inbox (`on_failure`) and calls `lose`.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from app.conversation.audio_source import (
    AudioSource,
    FrameSink,
    HasWarnings,
    OpensOneStream,
    ReportsErrors,
    SwitchesEchoMode,
)
from app.conversation.audio_stalls import StallResumer
from app.engine.events import AudioOut
from app.settings.schema import EchoMode

Notice = Callable[[str, str], None]  # (message, severity)
StateSink = Callable[[str, str], None]  # (state, detail): the session listener's on_state


class SessionAudio:
    def __init__(self, open_devices: Callable[[], AudioSource], on_failure: Callable[[str], None],
                 notice: Notice, state: StateSink) -> None:
        """`open_devices`: the devices the settings name, not started; `on_failure`: a device
        failed (called on the audio's thread: the session posts it to its inbox and calls
        `lose` on its own); `notice` and `state`: what the user is told."""
        self._open_devices = open_devices
        self._on_failure = on_failure
        self._notice = notice
        self._state = state
        self._push: FrameSink | None = None  # the pipeline's input, once started
        self._audio: AudioSource | None = None
        # Where the model's voice goes: the audio in use once it started (None while the
        # devices are being opened). Read by the pipeline's router thread, which plays.
        self._speaker: AudioSource | None = None
        self._muted = False
        self._error: str | None = None  # set from the audio's error callback
        # A stall (callbacks late, devices still there) reopens the audio by itself.
        self._stalls = StallResumer()
        self.resume_at: float | None = None  # monotonic; None: no resume due
        self.missing: tuple[str, ...] = ()  # "microphone", "speaker": not in use now
        self._said: set[tuple[str, ...]] = set()  # no-device notices already shown

    # ---- any thread -------------------------------------------------------------------

    @property
    def paused(self) -> bool:
        """The devices are not (all) in use: Resume tries them again."""
        return bool(self.missing) or self._error is not None

    def set_muted(self, muted: bool) -> None:
        self._muted = muted
        if self._audio is not None:
            self._audio.muted = muted

    def play(self, audio: AudioOut) -> None:
        """The model's voice, called on the pipeline's router thread as soon as the frame is
        out of the engine: straight to the jitter buffer, never behind the session's work
        (settings, the transcript, the listener) and never via Qt."""
        speaker = self._speaker
        if speaker is not None:
            speaker.play(audio.pcm)

    def _failed(self, message: str) -> None:
        self._error = message  # read at once while the devices open
        self._on_failure(message)  # handled by the session's thread

    # ---- the session's thread -----------------------------------------------------------

    @property
    def source(self) -> AudioSource | None:
        """The audio in use (its levels and counters for the status bar)."""
        return self._audio

    def set_echo_mode(self, mode: EchoMode) -> None:
        if isinstance(self._audio, SwitchesEchoMode):
            self._audio.set_echo_mode(mode)

    def start(self, push: FrameSink) -> None:
        """Open the devices, their frames to `push`; what cannot be opened is a mode (see
        the module's docstring)."""
        self._push = push
        self._open()

    def _open(self) -> None:
        assert self._push is not None
        audio = self._open_devices()
        audio.muted = self._muted
        if isinstance(audio, ReportsErrors):  # live devices: unplugging, stream failures
            audio.on_error = self._failed
        self._audio = audio
        started = audio.start(self._push) is not False
        if isinstance(audio, HasWarnings):
            for warning in audio.warnings:  # e.g. a saved device is gone
                self._notice(str(warning), "warning")
        if started and self._error is None:
            self.missing = ()
            self._speaker = audio
            self._state("running", "Listening")
            return
        reason = self._error or "the audio devices could not be opened"
        self._error = None
        audio.stop()
        self._without_devices(audio, reason)

    def _without_devices(self, failed: AudioSource, reason: str) -> None:
        """Use whichever of the microphone and the speaker opens alone; silence stands in
        for a missing microphone, a missing speaker's audio is dropped."""
        from app.audio.silent_microphone import SilentMicrophone

        push = self._push
        assert push is not None
        audio: AudioSource | None = None
        missing: tuple[str, ...] = ("microphone", "speaker")
        if isinstance(failed, OpensOneStream):  # LiveAudio can open one stream alone
            speaker = failed.only("output")
            if speaker.start(push) is not False:
                audio, missing = SilentMicrophone(speaker), ("microphone",)
            else:
                microphone = failed.only("input")
                if microphone.start(push) is not False:
                    audio, missing = microphone, ("speaker",)
        if audio is None:
            audio = SilentMicrophone()
        if isinstance(audio, SilentMicrophone):
            audio.start(push)
            if isinstance(audio.speaker, ReportsErrors):
                audio.speaker.on_error = self._failed
        elif isinstance(audio, ReportsErrors):
            audio.on_error = self._failed
        audio.muted = self._muted
        self._audio, self.missing = audio, missing
        self._speaker = audio
        self._error = None
        self._say_without_devices(missing, reason)

    def _say_without_devices(self, missing: tuple[str, ...], reason: str) -> None:
        what = " or ".join(missing)
        detail = {
            ("microphone", "speaker"): "typed questions only; the model's words are shown",
            ("microphone",): "type your questions; the model still speaks",
            ("speaker",): "the model's words are shown, not played",
        }[missing]
        self._state("paused", f"No {what}: {detail} (Resume tries again)")
        if missing in self._said:  # said once; Resume failing again is the state only
            return
        self._said.add(missing)
        self._notice(
            f"No {what} could be opened ({reason}). The conversation goes on without it: "
            f"{detail}, and \"Read this\" still reads text to the model. To fix it, connect "
            "a headset or choose the devices in Settings → Audio, then press Resume.",
            "warning")

    def lose(self) -> None:
        """A device failed mid-conversation (the failure `on_failure` reported): go on
        without audio until Resume, or, after a stall, until it resumes by itself a moment
        later. Nothing happens once the failure was handled, or before the devices open."""
        from app.audio.silent_microphone import SilentMicrophone

        push = self._push
        if self._error is None or push is None:
            return
        stalled = getattr(self._audio, "failure", "") == "stall"
        resume_at = self._stalls.after_stall(time.monotonic()) if stalled else None
        message = self._error or "audio device problem"
        self._error = None
        self._speaker = None
        if self._audio is not None:
            self._audio.stop()
        audio = SilentMicrophone()
        audio.start(push)
        self._audio, self.missing = audio, ("microphone", "speaker")
        self._speaker = audio
        if resume_at is not None:
            self.resume_at = resume_at
            self._notice(f"Audio paused: {message}. It starts again by itself in a moment; "
                         "the conversation and its context are kept.", "warning")
            self._state("paused", "Audio stalled: starting again…")
            return
        if stalled:
            self._notice(
                f"Audio stopped: {message}. It stalled {self._stalls.stalls_of_late() + 1} "
                "times within a minute, so it waits for you this time: press Resume when the "
                "computer is less busy. Typed questions and \"Read this\" still work.",
                "error")
        else:
            self._notice(
                f"Audio stopped: {message}. The conversation goes on without audio (paused): "
                "typed questions and \"Read this\" still work. Check the device, then press "
                "Resume.", "error")
        self._state("paused", f"Paused: {message}")

    def resume(self) -> None:
        """Resume, by hand: the devices that are missing are opened again, now."""
        self.resume_at = None
        if self.missing and self._push is not None:
            self._reopen()

    def resume_after_stall(self) -> None:
        """The pause after a stall is over: the devices are opened again."""
        self.resume_at = None
        self._reopen()
        if not self.missing:
            self._notice("The audio is back: it started again by itself after the stall.",
                         "info")

    def _reopen(self) -> None:
        """Open the devices from the settings again."""
        self._speaker = None
        if self._audio is not None:
            self._audio.stop()
        self._open()

    def stop(self) -> None:
        self._speaker = None
        if self._audio is not None:
            self._audio.stop()
