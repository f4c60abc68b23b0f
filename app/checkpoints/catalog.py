"""The model catalog: one JSON manifest per supported checkpoint, in `models/`.

A manifest says where the files come from, how injected spans are wrapped for that
checkpoint (a property of its training, not a constant in code), the defaults used to
sample from it, and how a conversation starts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.paths import CATALOG_DIR, checkpoints_dir


class CatalogError(ValueError):
    """A manifest is missing, unknown or malformed."""


@dataclass(frozen=True)
class SpanWrapping:
    """Text put around every injected span. Empty strings mean no wrapping."""

    open: str = ""
    close: str = ""
    trained: bool = False  # True when the checkpoint was trained on this wrapping


@dataclass(frozen=True)
class SamplingDefaults:
    dtype: str = "bfloat16"
    temp: float = 0.8
    temp_text: float = 0.7
    top_k: int = 250
    top_k_text: int = 25
    cfg_coef: float = 1.0


@dataclass(frozen=True)
class ConversationStart:
    """How the checkpoint's conversation begins before the first user frame.

    `kind` is "none" (Moshi) or "persona_prompt" (PersonaPlex: a voice prompt, then a role
    prompt in the text stream, each followed by silence frames).
    """

    kind: str = "none"
    voices_dir: str = "voices"
    voices_archive: str | None = None
    default_voice: str | None = None
    default_role: str = ""
    role_wrapping: SpanWrapping = field(default_factory=SpanWrapping)
    silence_frames: int = 6
    # Mimi codes of the model's own silence and of the user-side 440 Hz tone that the
    # reference server feeds during prompts. None: encode them with the loaded Mimi.
    agent_silence_codes: tuple[int, ...] | None = None
    user_tone_codes: tuple[int, ...] | None = None


@dataclass(frozen=True)
class Manifest:
    id: str
    display_name: str
    family: str
    source_kind: str  # "huggingface", "local" or "built"
    hf_repo: str | None
    hf_revision: str | None
    files: dict[str, str]  # role ("moshi", "mimi", "tokenizer", "config", ...) -> file name
    local_folder: str | None
    builder: str | None  # for source_kind == "built": the preset that builds it
    gated: bool
    licence: str
    span_wrapping: SpanWrapping
    sampling: SamplingDefaults
    max_span_tokens: int
    max_chunk_positions: int
    conversation_start: ConversationStart
    notes: str = ""

    def default_folder(self) -> Path:
        """Where this checkpoint's files live on disk once built or downloaded."""
        if self.local_folder:
            return Path(self.local_folder).expanduser()
        return checkpoints_dir() / self.id


def _wrapping(raw: dict[str, Any] | None) -> SpanWrapping:
    raw = raw or {}
    return SpanWrapping(
        open=str(raw.get("open", "")),
        close=str(raw.get("close", "")),
        trained=bool(raw.get("trained", False)),
    )


def _codes(raw: Any) -> tuple[int, ...] | None:
    if raw is None:
        return None
    return tuple(int(x) for x in raw)


def parse_manifest(raw: dict[str, Any], origin: str = "<manifest>") -> Manifest:
    try:
        source = raw["source"]
        kind = source["kind"]
        if kind not in ("huggingface", "local", "built"):
            raise CatalogError(f"{origin}: unknown source kind {kind!r}")
        start_raw = raw.get("conversation_start") or {"kind": "none"}
        start = ConversationStart(
            kind=start_raw.get("kind", "none"),
            voices_dir=start_raw.get("voices_dir", "voices"),
            voices_archive=start_raw.get("voices_archive"),
            default_voice=start_raw.get("default_voice"),
            default_role=start_raw.get("default_role", ""),
            role_wrapping=_wrapping(start_raw.get("role_wrapping")),
            silence_frames=int(start_raw.get("silence_frames", 6)),
            agent_silence_codes=_codes(start_raw.get("agent_silence_codes")),
            user_tone_codes=_codes(start_raw.get("user_tone_codes")),
        )
        if start.kind not in ("none", "persona_prompt"):
            raise CatalogError(f"{origin}: unknown conversation_start kind {start.kind!r}")
        sampling = SamplingDefaults(**raw.get("sampling", {}))
        return Manifest(
            id=raw["id"],
            display_name=raw["display_name"],
            family=raw.get("family", "moshi"),
            source_kind=kind,
            hf_repo=source.get("repo"),
            hf_revision=source.get("revision"),
            files=dict(source.get("files", {})),
            local_folder=source.get("folder"),
            builder=source.get("builder"),
            gated=bool(source.get("gated", False)),
            licence=raw.get("licence", ""),
            span_wrapping=_wrapping(raw.get("span_wrapping")),
            sampling=sampling,
            max_span_tokens=int(raw.get("max_span_tokens", 512)),
            max_chunk_positions=int(raw.get("max_chunk_positions", 256)),
            conversation_start=start,
            notes=raw.get("notes", ""),
        )
    except CatalogError:
        raise
    except (KeyError, TypeError, ValueError) as exc:
        raise CatalogError(f"{origin}: malformed manifest ({exc})") from exc


def load_catalog(folder: Path = CATALOG_DIR) -> dict[str, Manifest]:
    catalog: dict[str, Manifest] = {}
    for path in sorted(folder.glob("*.json")):
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise CatalogError(f"{path.name}: not valid JSON ({exc})") from exc
        manifest = parse_manifest(raw, origin=path.name)
        if manifest.id in catalog:
            raise CatalogError(f"{path.name}: model id {manifest.id!r} is used twice")
        catalog[manifest.id] = manifest
    if folder == CATALOG_DIR:
        # Checkpoints the user trained (app/training) are catalog entries like any other.
        from app.training.user_catalog import load_user_manifests

        catalog |= {k: v for k, v in load_user_manifests().items() if k not in catalog}
    return catalog


def get_manifest(model_id: str, folder: Path = CATALOG_DIR) -> Manifest:
    catalog = load_catalog(folder)
    if model_id not in catalog:
        known = ", ".join(sorted(catalog))
        raise CatalogError(f"unknown model {model_id!r} (known: {known})")
    return catalog[model_id]
