"""Audio devices by name: what the settings dialog lists and what a saved setting resolves to.

Settings store device *names*, not PortAudio indices, because indices change whenever a device
is plugged in or out. A saved name that is gone (headset unplugged) must not stop the app:
it falls back to the system default and says so in a warning the UI shows.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import sounddevice as sd

Kind = Literal["input", "output"]


@dataclass(frozen=True)
class ResolvedDevice:
    index: int | None  # PortAudio index; None: PortAudio's default device
    name: str  # what is actually used ("" when no device of that kind exists at all)
    warning: str | None = None  # set when the saved device was not found


def _channels_key(kind: Kind) -> str:
    return "max_input_channels" if kind == "input" else "max_output_channels"


def _devices(kind: Kind) -> list[tuple[int, str]]:
    """(index, name) of every device that has channels of this kind, first name wins."""
    seen: set[str] = set()
    found: list[tuple[int, str]] = []
    for info in sd.query_devices():
        name = str(info["name"])
        if info[_channels_key(kind)] > 0 and name not in seen:
            seen.add(name)
            found.append((int(info["index"]), name))
    return found


def list_devices() -> tuple[list[str], list[str]]:
    """Names of the input devices and of the output devices, in PortAudio's order: all of
    them, the system default's alias ("default") too, since a device in use must be found
    here (live_audio's unplug check); Settings offers the alias once, as the system default
    (audio_tab)."""
    return [n for _, n in _devices("input")], [n for _, n in _devices("output")]


def default_device(kind: Kind) -> ResolvedDevice:
    """The system default of this kind, or an empty name with a warning when there is none."""
    try:
        info = sd.query_devices(kind=kind)
    except (sd.PortAudioError, ValueError):
        devices = _devices(kind)
        if devices:  # no default set, but something exists: use the first one
            index, name = devices[0]
            return ResolvedDevice(index, name)
        return ResolvedDevice(None, "", f"no audio {kind} device found")
    return ResolvedDevice(int(info["index"]), str(info["name"]))


def resolve_device(name: str | None, kind: Kind) -> ResolvedDevice:
    """A saved device name -> the device to open. None or "" means the system default;
    a name that is no longer present falls back to the default with a warning."""
    if name:
        for index, device_name in _devices(kind):
            if device_name == name:
                return ResolvedDevice(index, device_name)
    fallback = default_device(kind)
    if not name:
        return fallback
    warning = f"{kind} device {name!r} not found; using the system default {fallback.name!r}"
    if fallback.warning:
        warning = f"{kind} device {name!r} not found, and {fallback.warning}"
    return ResolvedDevice(fallback.index, fallback.name, warning)


def rescan() -> None:
    """Make PortAudio enumerate devices again (it lists them once, when it starts).

    Only call this while no stream is open: PortAudio closes every stream when it restarts.
    """
    sd._terminate()
    sd._initialize()


def listed_now(timeout_s: float = 10.0) -> tuple[list[str], list[str]] | None:
    """The input and output device names as a fresh PortAudio sees them now (PortAudio in
    this process lists devices once, when it starts, and restarting it here would close
    every stream of the process); None when that cannot be learnt in time."""
    import json
    import subprocess
    import sys

    try:  # `-m`: what the packaged app's entry point (installer/pyinstaller) also runs
        run = subprocess.run([sys.executable, "-m", "app.audio.devices"],
                             cwd=Path(__file__).resolve().parents[2], capture_output=True,
                             text=True, timeout=timeout_s, check=True)
        inputs, outputs = json.loads(run.stdout.strip().splitlines()[-1])
        return list(inputs), list(outputs)
    except (OSError, subprocess.SubprocessError, ValueError, TypeError, IndexError):
        return None


def main(argv: list[str] | None = None) -> int:
    """`python -m app.audio.devices`: print the input and output device names (JSON), as
    this fresh process's PortAudio lists them (listed_now's child)."""
    import json

    print(json.dumps(list_devices()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
