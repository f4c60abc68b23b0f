"""Pick the device the engine runs on: CUDA, then Apple MPS, then the CPU."""

from __future__ import annotations

import torch


def choose_device(preference: str | None = None) -> torch.device:
    if preference and preference != "auto":
        device = torch.device(preference)
        if device.type == "cuda" and not torch.cuda.is_available():
            raise ValueError("device 'cuda' was asked for, but no CUDA GPU is available")
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
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()
