"""Manifests of locally trained checkpoints, in `<data dir>/models/<id>.json`.

Kept apart from the trainer (no torch import) so that the catalog can merge these in cheaply.
"""

from __future__ import annotations

import json
from pathlib import Path

from app.checkpoints.catalog import CatalogError, Manifest, parse_manifest
from app.paths import data_dir


def user_manifests_dir() -> Path:
    """Where trained checkpoints' manifests go: the catalog reads these besides `models/`."""
    return data_dir() / "models"


def load_user_manifests(folder: Path | None = None) -> dict[str, Manifest]:
    """The manifests of locally trained checkpoints, by id."""
    folder = folder or user_manifests_dir()
    found: dict[str, Manifest] = {}
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise CatalogError(f"{path}: not valid JSON ({exc})") from exc
        manifest = parse_manifest(raw, origin=str(path))
        found[manifest.id] = manifest
    return found
