"""Pick the device the engine runs on: CUDA, then Apple MPS, then the CPU; or MLX.

"mlx" is the MLX engine (app/engine/mlx/): the LM on `mlx.core`, chosen automatically on
Apple Silicon where mlx imports (the 7B keeps real time there only through MLX), and
selectable anywhere it imports (`mlx[cpu]` on Linux). Its Mimi is MLX's on Apple Silicon and
torch's on the CPU elsewhere (app/engine/mlx/frame_codec.py).

What Settings offers comes from here too (`survey_devices`): every device this machine has,
each with the precisions that run on it (torch_precision.precision_offer, which loads a small
layer at each), and the ones it lacks named with why. A device name the app does not know is
refused in words (`device_problem`), never with torch's own message.

torch is imported where it is used: the settings dialog checks a typed name without it.
"""

from __future__ import annotations

import functools
import platform
import re
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

MLX = "mlx"
AUTO = "auto"
DEVICE_NAMES = "auto, cpu, cuda (or cuda:N for the N-th GPU), mps or mlx"
_DEVICE = re.compile(r"auto|cpu|cuda(:\d+)?|mps|mlx")


def device_problem(name: str) -> str | None:
    """Why `name` is not a device the app can be asked for (None: it is one; whether this
    machine has it is `survey_devices`')."""
    text = name.strip().lower()
    if not text:
        return f"Choose a device: {DEVICE_NAMES}."
    if _DEVICE.fullmatch(text) is None:
        return f"“{name.strip()[:40]}” is not a device: choose {DEVICE_NAMES}."
    return None


def mlx_importable() -> bool:
    try:
        import mlx.core  # noqa: F401
    except ImportError:
        return False
    return True


def on_apple_silicon() -> bool:
    return sys.platform == "darwin" and platform.machine() == "arm64"


def uses_mlx(preference: str | None = None) -> bool:
    """Whether the engine for `preference` is the MLX one: asked for ("mlx"; an error
    where mlx does not import), or "auto" on Apple Silicon with mlx installed."""
    if preference == MLX:
        if not mlx_importable():
            raise ValueError("device 'mlx' was asked for, but mlx does not import here "
                             "(pip install mlx; on Linux, mlx[cpu])")
        return True
    return (not preference or preference == AUTO) and on_apple_silicon() and mlx_importable()


def choose_device(preference: str | None = None) -> torch.device:
    """The torch device. "mlx": the CPU, where the MLX engine's Mimi runs ("auto" stays
    torch's choice: the recogniser and the benchmarks still use the GPU or MPS). A name
    that is no device is a ValueError saying which are (torch's own message lists devices
    this app never runs on)."""
    import torch

    if preference == MLX and uses_mlx(preference):
        return torch.device("cpu")
    if preference and preference != AUTO:
        problem = device_problem(preference)
        if problem is not None:
            raise ValueError(f"{problem} (Settings → Speech model → Device, or --device)")
        device = torch.device(preference.strip().lower())
        if device.type == "cuda":
            if not torch.cuda.is_available():
                raise ValueError("device 'cuda' was asked for, but no CUDA GPU is available")
            if device.index is not None and device.index >= torch.cuda.device_count():
                raise ValueError(f"device '{device}' was asked for, but this machine has "
                                 f"{torch.cuda.device_count()} CUDA GPU(s)")
        if device.type == "mps" and not torch.backends.mps.is_available():
            raise ValueError("device 'mps' was asked for, but Apple MPS is not available")
        return device
    if torch.cuda.is_available():
        return torch.device("cuda")
    if torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def synchronize(device: torch.device) -> None:
    """Wait for queued device work, so that timings measure the work and not its launch."""
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


@dataclass(frozen=True)
class DeviceChoice:
    """A device the speech model may be asked to run on, as Settings offers it."""

    name: str  # what the settings keep: "auto", "cpu", "cuda", "cuda:1", "mps", "mlx"
    label: str  # "This computer's CPU (x86_64)", "NVIDIA H200"
    why_not: str | None = None  # None: it runs here; else why it does not
    precisions: tuple[str, ...] = ()  # what runs on it (app/engine/precision.py's names)
    not_here: tuple[tuple[str, str], ...] = ()  # (precision, why it does not run on it)
    auto_precisions: tuple[str, ...] = ()  # what "auto" picks from there, best first

    @property
    def available(self) -> bool:
        return self.why_not is None

    def why_not_precision(self, precision: str) -> str | None:
        """Why `precision` does not run on this device (None: it does, or "auto")."""
        if precision == AUTO or precision in self.precisions:
            return None
        said = dict(self.not_here).get(precision)
        runs = ", ".join(self.precisions) or "nothing"
        return said or f"{precision} does not run on {self.label} (it runs {runs})"


def find_choice(choices: tuple[DeviceChoice, ...], name: str | None) -> DeviceChoice | None:
    """The choice `name` means ("cuda:0" is "cuda"; None and "" are "auto")."""
    wanted = (name or AUTO).strip().lower()
    if wanted == "cuda:0" and not any(c.name == "cuda:0" for c in choices):
        wanted = "cuda"
    return next((choice for choice in choices if choice.name == wanted), None)


def _mlx_choice() -> DeviceChoice:
    from app.engine.precision import MLX_CPU_PRECISIONS, MLX_PRECISIONS, PRECISION_NAMES

    if not mlx_importable():
        return DeviceChoice(MLX, "the MLX engine", why_not="MLX is not installed here (pip "
                            "install mlx; on Linux, mlx[cpu])")
    if on_apple_silicon():
        return DeviceChoice(MLX, f"the MLX engine on this Mac's GPU ({platform.machine()})",
                            precisions=MLX_PRECISIONS, auto_precisions=("bf16", "q8", "q4"))
    slow = tuple((p, f"{PRECISION_NAMES[p]}: MLX computes in float32 on a CPU, where bf16 "
                     "is slow; choose fp32, q8 or q4")
                 for p in MLX_PRECISIONS if p not in MLX_CPU_PRECISIONS)
    return DeviceChoice(MLX, f"the MLX engine on this CPU ({platform.machine()})",
                        precisions=MLX_CPU_PRECISIONS, not_here=slow,
                        auto_precisions=MLX_CPU_PRECISIONS)


def _torch_choice(name: str, label: str, device: torch.device) -> DeviceChoice:
    from app.engine.torch_precision import precision_offer

    runs, not_here, auto = precision_offer(device)
    return DeviceChoice(name, label, precisions=runs, not_here=not_here, auto_precisions=auto)


@functools.cache
def survey_devices() -> tuple[DeviceChoice, ...]:
    """Every device Settings names, this machine's first: "auto" (what it picks here), the
    CPU, each CUDA GPU, MPS and MLX, the ones it lacks with why. Loads a small layer at each
    precision on each device (seconds, once a process): call it off the GUI thread."""
    import torch

    cpu = _torch_choice("cpu", f"This computer's CPU ({platform.machine()})",
                        torch.device("cpu"))
    cudas: list[DeviceChoice] = []
    if torch.cuda.is_available():
        for index in range(torch.cuda.device_count()):
            name = "cuda" if index == 0 else f"cuda:{index}"
            cudas.append(_torch_choice(name, torch.cuda.get_device_name(index),
                                       torch.device("cuda", index)))
    else:
        why = ("this torch was built without CUDA" if torch.version.cuda is None
               else "no NVIDIA GPU with a working CUDA driver was found")
        cudas.append(DeviceChoice("cuda", "an NVIDIA GPU", why_not=why))
    if torch.backends.mps.is_available():
        mps = _torch_choice("mps", f"This Mac's GPU ({platform.machine()})",
                            torch.device("mps"))
    else:
        mps = DeviceChoice("mps", "Apple's GPU (MPS)", why_not=(
            "MPS is on Macs with Apple silicon only" if not on_apple_silicon()
            else "this torch has no MPS"))
    mlx = _mlx_choice()
    # What choose_device and uses_mlx pick for "auto": the engine's own order.
    picked = mlx if uses_mlx(AUTO) else next((c for c in (*cudas, mps) if c.available), cpu)
    auto = DeviceChoice(AUTO, f"{picked.label}, the best found here",
                        precisions=picked.precisions, not_here=picked.not_here,
                        auto_precisions=picked.auto_precisions)
    return (auto, cpu, *cudas, mps, mlx)


def unsurveyed_devices() -> tuple[DeviceChoice, ...]:
    """The devices by the engines' rules alone, not asked of this machine (what the
    settings dialog offers where no survey is given: tests of other parts)."""
    from app.engine.precision import MLX_PRECISIONS, PRECISION_CHOICES, TORCH_PRECISIONS

    def named(name: str, label: str, runs: tuple[str, ...]) -> DeviceChoice:
        return DeviceChoice(name, label, precisions=runs, auto_precisions=runs)

    every = tuple(p for p in PRECISION_CHOICES if p != AUTO)
    return (named(AUTO, "the best found when the model loads", every),
            named("cpu", "the CPU", ("fp32", "bf16", "int8")),
            named("cuda", "an NVIDIA GPU", TORCH_PRECISIONS),
            named("mps", "Apple's GPU (MPS)", ("fp32", "bf16")),
            named(MLX, "the MLX engine", MLX_PRECISIONS))


def gpu_for_speech() -> str | None:
    """The GPU the engine would run a speech model on here, by name ("NVIDIA H200", "this
    Mac's GPU"), or None when there is only the CPU. Quick (no layer is loaded), but it may
    start CUDA's driver: call it off the GUI thread."""
    import torch

    if uses_mlx(AUTO):
        return f"this Mac's GPU ({platform.machine()}, MLX)"
    if torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    if torch.backends.mps.is_available():
        return "this Mac's GPU (MPS)"
    return None
