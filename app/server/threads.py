"""How many threads torch's operators use in `serve`: chosen once for the process, before the
model loads, and said in the start line.

Why not torch's default (one thread per core): every operator of a frame's step is split
across the threads and waits at OpenMP's barrier for the slowest one, and a thread whose core
is busy elsewhere (another process, the server's own event loop, Opus, the recogniser) makes
the whole step wait for the scheduler. The step of a conversation is many small operators,
so the split gains little and the waiting costs much: moshi's own client against
`serve --model tiny` on a loaded 2-core machine measured 184-360 ms per frame's round trip
with torch's default threads and 17-23 ms with one (923 ms against 44 ms with --slots 3).

The rule, `--threads auto` (the default):
- OMP_NUM_THREADS set: that number. Whoever set it decided (a user, or Ray, which sets it for
  each replica from `--cpus-per-replica`).
- the model on a GPU (cuda, mps): 1. The GPU does the arithmetic; the CPU only launches
  kernels, and more threads would spin beside the event loop.
- the model on the CPU: half the cores this process may use (its affinity and its cgroup's
  CPU quota, as a container's `--cpus` sets it), at least 1 and at most 8. One thread steps
  every conversation whatever `--slots` is (slots share one batched forward), so the count
  does not grow with the slots; the other half is left to what runs beside the step (the
  event loop, Opus, the recogniser's thread). Past 8, a step's operators are too small to
  split further.
`--threads N` sets N.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

MAX_AUTO_THREADS = 8
_CGROUP_CPU_MAX = Path("/sys/fs/cgroup/cpu.max")  # cgroup v2: "QUOTA PERIOD" or "max PERIOD"


@dataclass(frozen=True)
class ThreadChoice:
    threads: int
    why: str  # for the start line: what chose the number

    def describe(self) -> str:
        plural = "" if self.threads == 1 else "s"
        return f"{self.threads} torch thread{plural} ({self.why})"


def parse_threads(text: str) -> int | None:
    """`--threads`: "auto" (None) or a positive number."""
    if text == "auto":
        return None
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"--threads takes a number or 'auto', not {text!r}") from None
    if value < 1:
        raise ValueError("--threads must be at least 1")
    return value


def usable_cores(cgroup_cpu_max: Path = _CGROUP_CPU_MAX) -> int:
    """Cores this process may run on: its CPU affinity, lowered by a cgroup CPU quota."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cores = os.cpu_count() or 1
    try:
        quota, period = cgroup_cpu_max.read_text().split()[:2]
        if quota != "max":
            cores = min(cores, max(1, math.floor(int(quota) / int(period))))
    except (OSError, ValueError):  # no cgroup v2 quota here
        pass
    return max(1, cores)


def choose_threads(requested: int | None, device_type: str,
                   environ: Mapping[str, str] | None = None,
                   cores: int | None = None) -> ThreadChoice:
    """The rule of the module's docstring. `device_type`: "cpu", "cuda" or "mps"."""
    if requested is not None:
        return ThreadChoice(requested, "--threads")
    environ = os.environ if environ is None else environ
    from_env = environ.get("OMP_NUM_THREADS", "").strip()
    if from_env.isdigit() and int(from_env) > 0:
        return ThreadChoice(int(from_env), "OMP_NUM_THREADS")
    if device_type != "cpu":
        return ThreadChoice(1, f"auto: the model runs on {device_type}")
    cores = usable_cores() if cores is None else cores
    threads = max(1, min(MAX_AUTO_THREADS, cores // 2))
    return ThreadChoice(threads, f"auto: half of {cores} usable core{'s' if cores > 1 else ''}"
                                 f", at most {MAX_AUTO_THREADS}")


def apply_threads(requested: int | None, device_type: str) -> ThreadChoice:
    """Choose and set torch's intra-op threads for this process; returns the choice."""
    import torch

    choice = choose_threads(requested, device_type)
    torch.set_num_threads(choice.threads)
    return choice
