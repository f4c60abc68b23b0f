"""Load a checkpoint folder through moshi's own loaders, never reaching the network.

Every file is resolved to a local path before moshi's `CheckpointInfo` sees it, so its
Hugging Face download path is never taken: downloading is the desktop app's job.
A real checkpoint and the tiny one go through exactly this code.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sentencepiece
import torch
from moshi.models import LMModel, MimiModel, loaders

from app.checkpoints.architectures import lm_architecture, mimi_architecture
from app.checkpoints.builders import BUILDERS
from app.checkpoints.catalog import Manifest
from app.checkpoints.missing import CheckpointMissingError
from app.checkpoints.release_weights import load_lm_weights
from app.checkpoints.tiny_builder import RANDOM_WEIGHTS_MARKER
from app.moshi_internals import moshi_7b_config

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class LoadedCheckpoint:
    manifest: Manifest
    folder: Path
    info: loaders.CheckpointInfo
    mimi: MimiModel
    lm: LMModel
    tokenizer: sentencepiece.SentencePieceProcessor
    device: torch.device
    dtype: torch.dtype
    # Held by the one engine streaming these modules (their streaming state lives in them):
    # engines made one after another on one loaded checkpoint take turns (row_host.py).
    streaming: threading.Lock = field(default_factory=threading.Lock, repr=False,
                                      compare=False, kw_only=True)


def parse_dtype(name: str) -> torch.dtype:
    if name not in _DTYPES:
        raise ValueError(f"unknown dtype {name!r} (choose from {', '.join(_DTYPES)})")
    return _DTYPES[name]


def _how_to_get(manifest: Manifest) -> str:
    if manifest.source_kind == "built":
        return f"build it with: python main.py build {manifest.id}"
    if manifest.source_kind == "huggingface":
        gated = " (gated: accept its licence on Hugging Face and set HF_TOKEN)"
        return (
            f"download it from Hugging Face repo {manifest.hf_repo}"
            f"{gated if manifest.gated else ''}, or choose a local folder"
        )
    return "choose the folder that holds it"


def _config(folder: Path) -> dict | None:
    path = folder / "config.json"
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise CheckpointMissingError(f"{path} is not valid JSON ({exc})") from exc


def file_names(config: dict) -> dict[str, str]:
    """The files a checkpoint's config.json names (moshi's defaults where it names none)."""
    names = {
        "moshi": config.get("moshi_name", loaders.MOSHI_NAME),
        "mimi": config.get("mimi_name", loaders.MIMI_NAME),
        "tokenizer": config.get("tokenizer_name", loaders.TEXT_TOKENIZER_NAME),
    }
    if config.get("mimi_config_name"):
        names["mimi_config"] = config["mimi_config_name"]
    if config.get("lora_name"):
        names["lora"] = config["lora_name"]
    return names


def info_from_local_files(folder: Path, names: dict[str, str], config_path: Path,
                          hf_repo: str | None) -> loaders.CheckpointInfo:
    """moshi's CheckpointInfo from files already on disk. Paths (never strings) everywhere:
    moshi's hf_get returns a Path as it is and never downloads it."""
    def path(role: str) -> Path | None:
        return folder / names[role] if role in names else None

    return loaders.CheckpointInfo.from_hf_repo(
        hf_repo or "local",
        moshi_weights=path("moshi"),
        mimi_weights=path("mimi"),
        tokenizer=path("tokenizer"),
        config_path=config_path,
        mimi_config_path=path("mimi_config"),
        lora_weights=path("lora"),
    )


def runtime_dtype(name: str, device: torch.device) -> torch.dtype:
    """The manifest's dtype, except on the CPU: bf16 matmuls there are slow and gain nothing."""
    dtype = parse_dtype(name)
    return torch.float32 if device.type == "cpu" and dtype != torch.float32 else dtype


def checkpoint_info(manifest: Manifest, folder: Path | None = None) -> loaders.CheckpointInfo:
    """Resolve the checkpoint's files in `folder` into moshi's CheckpointInfo."""
    folder = Path(folder) if folder is not None else manifest.default_folder()
    if not folder.is_dir():
        raise CheckpointMissingError(
            f"model {manifest.id!r} is not on disk (no folder {folder}); {_how_to_get(manifest)}"
        )
    config = _config(folder)
    random_weights = bool(config and config.get(RANDOM_WEIGHTS_MARKER))
    if config is None and manifest.architecture is not None:
        return _release_info(manifest, folder)
    if config is None:
        # Legacy layout (kyutai/moshi*-pytorch-bf16): no config.json, moshi's 7B defaults.
        names = {
            "moshi": manifest.files.get("moshi", loaders.MOSHI_NAME),
            "mimi": manifest.files.get("mimi", loaders.MIMI_NAME),
            "tokenizer": manifest.files.get("tokenizer", loaders.TEXT_TOKENIZER_NAME),
        }
    else:
        names = file_names(config)
    required = dict(names)
    if random_weights:
        required.pop("moshi")
        required.pop("mimi")
    missing = [name for name in required.values() if not (folder / name).is_file()]
    if missing:
        raise CheckpointMissingError(
            f"model {manifest.id!r} in {folder} is missing {', '.join(missing)}; "
            f"{_how_to_get(manifest)}"
        )
    if config is None:
        return loaders.CheckpointInfo(
            moshi_weights=folder / names["moshi"],
            mimi_weights=folder / names["mimi"],
            tokenizer=folder / names["tokenizer"],
        )
    return info_from_local_files(folder, names, folder / "config.json", manifest.hf_repo)


def _release_info(manifest: Manifest, folder: Path) -> loaders.CheckpointInfo:
    """A repository of bare weights (PersonaPlex, the Context Spanning release): the file
    names come from the manifest, the architecture from architectures.py."""
    assert manifest.architecture is not None
    # Voices are needed only when chosen: a missing one is said at the start, by name.
    missing = [name for role, name in manifest.files.items()
               if not role.startswith("voice") and not (folder / name).is_file()]
    if missing:
        raise CheckpointMissingError(
            f"model {manifest.id!r} in {folder} is missing {', '.join(missing)}; "
            f"{_how_to_get(manifest)}"
        )
    for role in ("moshi", "mimi", "tokenizer"):
        if role not in manifest.files:
            raise CheckpointMissingError(f"model {manifest.id!r}: its manifest names no {role}")
    return loaders.CheckpointInfo(
        moshi_weights=folder / manifest.files["moshi"],
        mimi_weights=folder / manifest.files["mimi"],
        tokenizer=folder / manifest.files["tokenizer"],
        lm_config=lm_architecture(manifest.architecture.lm),
        mimi_config=mimi_architecture(manifest.architecture.mimi),
    )


def _is_built(manifest: Manifest, folder: Path) -> bool:
    if manifest.files:
        return all((folder / name).is_file() for name in manifest.files.values())
    return (folder / "config.json").is_file()


def ensure_built(manifest: Manifest, folder: Path | None = None) -> Path:
    """Build a `built` checkpoint (tiny, random 7B) if its folder is not there yet."""
    folder = Path(folder) if folder is not None else manifest.default_folder()
    if manifest.source_kind != "built":
        return folder
    if not _is_built(manifest, folder):
        builder = BUILDERS.get(manifest.builder or "")
        if builder is None:
            raise CheckpointMissingError(
                f"model {manifest.id!r} names unknown builder {manifest.builder!r}"
            )
        builder(folder)
    return folder


def load_codec_and_tokenizer(manifest: Manifest, folder: Path | None = None,
                             device: str | torch.device = "cpu"
                             ) -> tuple[loaders.CheckpointInfo, MimiModel,
                                        sentencepiece.SentencePieceProcessor]:
    """A checkpoint's Mimi and tokenizer without its LM: for an engine that runs the LM in
    another framework (MLX), so the torch LM's memory is never taken."""
    folder = Path(folder) if folder is not None else manifest.default_folder()
    info = checkpoint_info(manifest, folder)
    random_weights = bool(info.raw_config and info.raw_config.get(RANDOM_WEIGHTS_MARKER))
    per_side = int((info.lm_config or moshi_7b_config())["n_q"]) // 2  # as load_checkpoint
    mimi = loaders.get_mimi(None if random_weights else info.mimi_weights, info.mimi_config,
                            device=torch.device(device), num_codebooks=per_side)
    return info, mimi, info.get_text_tokenizer()


def load_checkpoint(
    manifest: Manifest,
    folder: Path | None = None,
    device: str | torch.device = "cpu",
    dtype: torch.dtype | None = None,
) -> LoadedCheckpoint:
    folder = Path(folder) if folder is not None else manifest.default_folder()
    info = checkpoint_info(manifest, folder)
    device = torch.device(device)
    if dtype is None:
        dtype = runtime_dtype(manifest.sampling.dtype, device)
    random_weights = bool(info.raw_config and info.raw_config.get(RANDOM_WEIGHTS_MARKER))
    # Mimi runs with one side's codebooks (8): moshi's own get_mimi would give a dep_q 16
    # checkpoint (PersonaPlex) 16, the agent's and the user's together.
    lm_config: dict[str, Any] = info.lm_config or moshi_7b_config()  # moshi 7B's by default
    per_side = int(lm_config["n_q"]) // 2
    if random_weights:
        # Random weights of the real architecture: moshi's loaders with no weight file.
        assert info.lm_config is not None  # read from the same config.json as the marker
        info.lm_config = {k: v for k, v in info.lm_config.items() if k != RANDOM_WEIGHTS_MARKER}
        mimi = loaders.get_mimi(None, info.mimi_config, device=device, num_codebooks=per_side)
        lm = info.get_moshi(device=device, dtype=dtype, load_weight=False)
    elif manifest.architecture is not None and info.raw_config is None:
        mimi = loaders.get_mimi(info.mimi_weights, info.mimi_config, device=device,
                                num_codebooks=per_side)
        lm = load_lm_weights(info.moshi_weights, info.lm_config or {}, device, dtype)
    else:
        mimi = loaders.get_mimi(info.mimi_weights, info.mimi_config, device=device,
                                num_codebooks=per_side)
        lm = info.get_moshi(device=device, dtype=dtype)
    lm.eval()
    tokenizer = info.get_text_tokenizer()
    return LoadedCheckpoint(manifest, folder, info, mimi, lm, tokenizer, device, dtype)
