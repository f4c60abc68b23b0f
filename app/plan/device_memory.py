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
from typing import Any

from app.plan.memory_plan import DeviceMemory


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
    """The device `preference` names (None or "auto": the best found, as the engine picks),
    with the precisions that run on it as Settings offers them (device.survey_devices: one
    answer for both). A device this machine lacks is a ValueError saying why."""
    import torch

    from app.engine.device import choose_device, find_choice, survey_devices, uses_mlx

    choice = find_choice(survey_devices(), preference)
    if choice is not None and choice.why_not is not None:
        raise ValueError(f"{choice.name}: {choice.why_not}")
    offer: dict[str, Any] = {} if choice is None else {"precisions": choice.precisions,
                                             "auto_precisions": choice.auto_precisions}
    # The MLX engine: asked for, or auto on Apple silicon with mlx (the engine's own choice).
    if preference == "mlx" or uses_mlx(preference):
        total = _physical_memory()
        free = _available_memory() or total
        if sys.platform == "darwin":
            return DeviceMemory("mac", f"This Mac ({platform.machine()}, MLX)", total, free,
                                **offer)
        # MLX on a CPU computes float32 under its 8 and 4 bits (mlx/checkpoint.py).
        return DeviceMemory("cpu", f"MLX on this CPU ({platform.machine()})", total, free,
                            **offer)
    device = choose_device(preference)
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        return DeviceMemory("cuda", torch.cuda.get_device_name(device), int(total), int(free),
                            **offer)
    total = _physical_memory()
    free = _available_memory() or total
    if device.type == "mps":
        limit = int(torch.mps.recommended_max_memory()) if hasattr(
            torch.mps, "recommended_max_memory") else None
        # The torch engine on MPS: bf16 (8 and 4 bits are the MLX engine's).
        return DeviceMemory("mac", f"This Mac ({platform.machine()})", total, free,
                            gpu_limit_bytes=limit, **offer)
    return DeviceMemory("cpu", f"This computer's CPU ({platform.machine()})", total, free,
                        **offer)
