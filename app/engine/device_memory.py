"""The memory of the device the models would load on, as the memory plan needs it.

CUDA reports its free memory itself (`torch.cuda.mem_get_info`, after other programs and
any loaded Ollama model). A Mac's GPU shares the RAM: Metal's working-set limit (torch.mps
reports it) bounds what the models may take together. A CPU has its available RAM.
"""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path

from app.engine.memory_plan import DEVICE_PRECISIONS, DeviceMemory


def _physical_memory() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _available_memory() -> int | None:
    """MemAvailable on Linux (what can be allocated without swapping); None elsewhere."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def probe_device_memory(preference: str | None = None) -> DeviceMemory:
    """The device `preference` names (None or "auto": the best found, as the engine picks)."""
    import torch

    from app.engine.device import choose_device

    if preference == "mlx":  # the MLX engine: Apple silicon, or any CPU MLX imports on
        total = _physical_memory()
        free = _available_memory() or total
        if sys.platform == "darwin":
            return DeviceMemory("mac", f"This Mac ({platform.machine()}, MLX)", total, free)
        return DeviceMemory("cpu", f"MLX on this CPU ({platform.machine()})", total, free,
                            precisions=DEVICE_PRECISIONS["mac"])
    device = choose_device(preference)
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        return DeviceMemory("cuda", torch.cuda.get_device_name(device), int(total), int(free))
    total = _physical_memory()
    free = _available_memory() or total
    if device.type == "mps":
        limit = int(torch.mps.recommended_max_memory()) if hasattr(
            torch.mps, "recommended_max_memory") else None
        return DeviceMemory("mac", f"This Mac ({platform.machine()})", total, free,
                            gpu_limit_bytes=limit)
    return DeviceMemory("cpu", f"This computer's CPU ({platform.machine()})", total, free)
