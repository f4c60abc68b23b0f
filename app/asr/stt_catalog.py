"""STT checkpoints: one JSON manifest each in `models/stt/`, and their offline loader.

A manifest says where the files come from and how to read the end-of-speech heads. What
the model itself needs (audio delay, silence prefix, extra heads, Mimi and tokenizer names)
comes from the checkpoint's own config.json, read by moshi's `CheckpointInfo`. Every file
is resolved to a local path first, so moshi never reaches the network: downloading is the
desktop app's job. The real checkpoint and the tiny one go through this same code.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.checkpoints.manifest_folder import CatalogError, load_manifest_folder
from app.checkpoints.missing import CheckpointMissingError
from app.paths import CATALOG_DIR, checkpoints_dir

if TYPE_CHECKING:  # the catalog is read without them (Settings lists it in the thin client)
    import sentencepiece
    import torch
    from moshi.models import LMModel, MimiModel, loaders

STT_CATALOG_DIR = CATALOG_DIR / "stt"


@dataclass(frozen=True)
class EndOfSpeechHeads:
    """How to read the STT's own end-of-speech signal (Kyutai's "semantic VAD").

    The model's extra heads each give a softmax over `dim` classes per frame; Kyutai's
    examples take head `head`, class `label` as the probability that the turn is over and
    compare it to `threshold`. When config.json declares no extra heads, `weights_file`
    (fetched from `weights_repo`) is a weight file of the same model that has them: it is
    used instead of the config's weights when it is on disk, with `num_heads` x `dim` heads.
    """

    head: int = 2
    label: int = 0
    threshold: float = 0.5
    hold_frames: int = 1  # consecutive frames above the threshold that end the turn
    num_heads: int = 4
    dim: int = 6
    weights_repo: str | None = None
    weights_repo_file: str | None = None
    weights_file: str | None = None  # local name in the checkpoint folder


@dataclass(frozen=True)
class SttManifest:
    id: str
    display_name: str
    source_kind: str  # "huggingface" or "built"
    hf_repo: str | None
    hf_revision: str | None
    files: dict[str, str]  # role ("config", "moshi", "mimi", "tokenizer") -> file name
    builder: str | None  # for source_kind == "built"
    gated: bool
    licence: str
    dtype: str
    end_of_speech: EndOfSpeechHeads
    notes: str = ""
    for_developers: bool = False  # as a speech model's (app/checkpoints/catalog.py)
    # The LM keys of the repository's config.json, to size the model before it is downloaded
    # (app/plan/footprint.py); the downloaded config.json wins once it is on disk.
    published_config: dict[str, Any] | None = None

    def default_folder(self) -> Path:
        return checkpoints_dir() / self.id


def parse_stt_manifest(raw: dict[str, Any], origin: str = "<manifest>") -> SttManifest:
    try:
        source = raw["source"]
        kind = source["kind"]
        if kind not in ("huggingface", "built"):
            raise CatalogError(f"{origin}: unknown source kind {kind!r}")
        return SttManifest(
            id=raw["id"],
            display_name=raw["display_name"],
            source_kind=kind,
            hf_repo=source.get("repo"),
            hf_revision=source.get("revision"),
            files=dict(source.get("files", {})),
            builder=source.get("builder"),
            gated=bool(source.get("gated", False)),
            licence=raw.get("licence", ""),
            dtype=raw.get("dtype", "bfloat16"),
            end_of_speech=EndOfSpeechHeads(**raw.get("end_of_speech", {})),
            notes=raw.get("notes", ""),
            for_developers=bool(raw.get("for_developers", False)),
            published_config=raw.get("published_config"),
        )
    except CatalogError:
        raise
    except (KeyError, TypeError, ValueError) as exc:
        raise CatalogError(f"{origin}: malformed STT manifest ({exc})") from exc


def load_stt_catalog(folder: Path = STT_CATALOG_DIR) -> dict[str, SttManifest]:
    return load_manifest_folder(folder, parse_stt_manifest, what="STT model")


def get_stt_manifest(model_id: str, folder: Path = STT_CATALOG_DIR) -> SttManifest:
    catalog = load_stt_catalog(folder)
    if model_id not in catalog:
        raise CatalogError(f"unknown STT model {model_id!r} (known: {', '.join(sorted(catalog))})")
    return catalog[model_id]


# ---- loading ----------------------------------------------------------------------------


@dataclass
class LoadedStt:
    manifest: SttManifest
    folder: Path
    info: loaders.CheckpointInfo
    mimi: MimiModel
    lm: LMModel
    tokenizer: sentencepiece.SentencePieceProcessor
    device: torch.device
    dtype: torch.dtype
    audio_delay_s: float  # the text stream trails the audio by this much
    silence_prefix_s: float  # silence the model expects before the first audio
    end_of_speech: EndOfSpeechHeads | None  # None: the checkpoint has no such heads
    # Held by the one recogniser streaming these modules (their streaming state lives in
    # them): a series of conversations on one loaded model (eval fdb3, a new conversation
    # while the last winds down) takes turns, never two at once (recogniser.py).
    streaming: threading.Lock = field(default_factory=threading.Lock, repr=False,
                                      compare=False)

    @property
    def frame_rate(self) -> float:
        return float(self.mimi.frame_rate)


def _how_to_get(manifest: SttManifest) -> str:
    if manifest.source_kind == "built":
        return f"build it with: python main.py build {manifest.id}"
    return f"download it from Hugging Face repo {manifest.hf_repo}, or choose a local folder"


def stt_checkpoint_info(manifest: SttManifest, folder: Path) -> loaders.CheckpointInfo:
    """Resolve the STT's files in `folder` into moshi's CheckpointInfo, offline."""
    from app.checkpoints.loader import file_names, info_from_local_files

    config_path = folder / manifest.files.get("config", "config.json")
    if not config_path.is_file():
        raise CheckpointMissingError(
            f"STT model {manifest.id!r} is not on disk (no {config_path}); {_how_to_get(manifest)}"
        )
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise CheckpointMissingError(f"{config_path} is not valid JSON ({exc})") from exc
    names = file_names(config)
    missing = [name for name in names.values() if not (folder / name).is_file()]
    if missing:
        raise CheckpointMissingError(
            f"STT model {manifest.id!r} in {folder} is missing {', '.join(missing)}; "
            f"{_how_to_get(manifest)}"
        )
    return info_from_local_files(folder, names, config_path, manifest.hf_repo)


def ensure_stt_built(manifest: SttManifest) -> Path:
    """The STT's folder, building a `built` checkpoint (tiny-stt, seconds) if it is missing.
    Real STT checkpoints are downloaded by the app, never here."""
    folder = manifest.default_folder()
    if manifest.source_kind == "built" and not (folder / "config.json").is_file():
        from app.asr.tiny_stt_builder import build_tiny_stt

        build_tiny_stt(folder)
    return folder


def load_stt(
    manifest: SttManifest,
    folder: Path | None = None,
    device: str | torch.device = "cpu",
    dtype: torch.dtype | None = None,
) -> LoadedStt:
    import torch

    from app.checkpoints.loader import runtime_dtype

    folder = Path(folder) if folder is not None else manifest.default_folder()
    info = stt_checkpoint_info(manifest, folder)
    if info.model_type != "stt" or (info.lm_config or {}).get("dep_q", 8) != 0:
        raise CatalogError(
            f"{folder} does not hold an STT checkpoint (model_type {info.model_type!r})"
        )
    device = torch.device(device)
    if dtype is None:
        dtype = runtime_dtype(manifest.dtype, device)
    heads: EndOfSpeechHeads | None = None
    declared = int((info.lm_config or {}).get("extra_heads_num_heads", 0))
    eos = manifest.end_of_speech
    overrides: dict[str, Any] = {}
    if declared > eos.head:
        heads = eos
    elif eos.weights_file and (folder / eos.weights_file).is_file():
        # Same model published with its end-of-speech heads: load those weights instead.
        info.moshi_weights = folder / eos.weights_file
        overrides = {"extra_heads_num_heads": eos.num_heads, "extra_heads_dim": eos.dim}
        heads = eos
    mimi = info.get_mimi(device=device)
    lm = info.get_moshi(device=device, dtype=dtype, lm_kwargs_overrides=overrides)
    lm.eval()
    stt = info.stt_config
    return LoadedStt(
        manifest=manifest,
        folder=folder,
        info=info,
        mimi=mimi,
        lm=lm,
        tokenizer=info.get_text_tokenizer(),
        device=device,
        dtype=dtype,
        audio_delay_s=float(stt.get("audio_delay_seconds", 0.0)),
        silence_prefix_s=float(stt.get("audio_silence_prefix_seconds", 0.0)),
        end_of_speech=heads,
    )
