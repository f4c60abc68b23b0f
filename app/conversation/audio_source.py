"""What a conversation asks of its audio: the microphone's frames in, the model's voice out.

`AudioSource` is what every source has (live devices, a file, silence standing in for a
missing microphone). Live devices can do more, and the session uses each of these when a
source has it: they are small protocols of their own, checked with `isinstance`, so a type
checker sees every call the session makes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from app.settings.schema import EchoMode

FrameSink = Callable[[npt.NDArray[np.float32]], object]


class AudioSource(Protocol):
    muted: bool  # the microphone's frames go out as silence while True

    def start(self, on_frame: FrameSink) -> bool | None:
        """Start calling `on_frame` with 80 ms frames; False when the devices cannot be
        opened (None or True: started)."""
        ...

    def play(self, frame: npt.NDArray[np.float32]) -> None:
        """Queue one of the model's frames for the speaker; never waits (called from the
        pipeline's router thread)."""
        ...

    def levels(self) -> tuple[float, float]: ...
    def counters(self) -> dict[str, int]: ...
    def stop(self, timeout: float = 5.0) -> bool: ...


@runtime_checkable
class ReportsErrors(Protocol):
    """Devices that can fail while running (unplugged, a stream error) say so here."""

    on_error: Callable[[str], None] | None


@runtime_checkable
class OpensOneStream(Protocol):
    """Devices that can open the microphone ("input") or the speaker ("output") alone."""

    def only(self, kind: str) -> AudioSource: ...


@runtime_checkable
class HasWarnings(Protocol):
    """Devices that opened, with something to say (e.g. a saved device is gone)."""

    warnings: tuple[str, ...]


@runtime_checkable
class SwitchesEchoMode(Protocol):
    """Devices whose echo handling changes while they run (Settings → Audio)."""

    def set_echo_mode(self, mode: EchoMode) -> None: ...
