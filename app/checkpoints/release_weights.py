"""Load an LM from bare weight files (no config.json) strictly, on stock moshi.

Two formats reach us: safetensors (PersonaPlex's `model.safetensors`) and the Context
Spanning release's torch pickle `{"model": state_dict}`, whose keys carry torch.compile's
`._orig_mod.`. Both may hold each attention's projections as one concatenated matrix (the
PersonaPlex fork's naming) or one Linear per depformer step (stock moshi's): moshi's own load
hook splits the former, so either loads. Every parameter must be in the file and nothing else
may be: a mismatch is an error that names the keys, never a silently random weight.
"""

from __future__ import annotations

from pathlib import Path

import torch
from moshi.models import LMModel, loaders
from safetensors.torch import load_file

COMPILE_PREFIX = "._orig_mod."


class WeightsFormatError(ValueError):
    """The file is not a state dict for this architecture (the message names the keys)."""


def read_state_dict(path: Path) -> dict[str, torch.Tensor]:
    """The tensors of a weight file, with torch.compile's `._orig_mod.` taken out of names.

    Pickles are read with `weights_only=True` (a downloaded file runs no code) and
    memory-mapped when the file allows it, so a 15 GB checkpoint is not copied into RAM."""
    path = Path(path)
    if path.suffix in (".safetensors", ".sft", ".sfts"):
        state = load_file(str(path), device="cpu")
    else:
        try:
            package = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError:  # an old (non-zip) pickle cannot be memory-mapped
            package = torch.load(path, map_location="cpu", weights_only=True)
        if isinstance(package, dict) and isinstance(package.get("model"), dict):
            package = package["model"]
        if not isinstance(package, dict) or not all(
                isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in package.items()):
            raise WeightsFormatError(f"{path.name} does not hold a state dict of tensors")
        state = package
    return {key.replace(COMPILE_PREFIX, "."): value for key, value in state.items()}


def _summary(keys: list[str]) -> str:
    shown = ", ".join(sorted(keys)[:4])
    return f"{len(keys)} ({shown}{', ...' if len(keys) > 4 else ''})"


def load_lm_weights(path: Path, lm_config: dict, device: torch.device | str,
                    dtype: torch.dtype) -> LMModel:
    """Build the LM on the meta device and load every parameter from `path`, strictly."""
    device = torch.device(device)
    model = loaders.get_moshi_lm(None, lm_kwargs=lm_config, device=torch.device("meta"),
                                 dtype=dtype)
    wanted = model.state_dict()
    state = read_state_dict(path)
    converted: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        target = wanted.get(key)
        if value.dtype.is_floating_point:
            # Each parameter in the dtype the model was built with.
            value = value.to(target.dtype if target is not None else dtype)
        converted[key] = value.to(device)
    del state
    try:
        result = model.load_state_dict(converted, strict=False, assign=True)
    except RuntimeError as exc:  # a shape mismatch
        raise WeightsFormatError(f"{Path(path).name} does not fit this architecture: "
                                 f"{str(exc).splitlines()[-1].strip()}") from exc
    if result.missing_keys or result.unexpected_keys:
        problems = []
        if result.missing_keys:
            problems.append(f"missing {_summary(result.missing_keys)}")
        if result.unexpected_keys:
            problems.append(f"unexpected {_summary(result.unexpected_keys)}")
        raise WeightsFormatError(
            f"{Path(path).name} does not match the architecture: {'; '.join(problems)}")
    left_on_meta = [name for name, t in [*model.named_parameters(), *model.named_buffers()]
                    if t.is_meta]
    if left_on_meta:
        raise WeightsFormatError(f"{Path(path).name} leaves {_summary(left_on_meta)} unset")
    model.eval()
    return model
