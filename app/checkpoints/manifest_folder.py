"""A folder of manifests, one JSON file each, read into a dict by id.

The speech models (`models/`), the speech recognizers (`models/stt/`) and the checkpoints
trained here (`<data dir>/models/`) are all kept this way; each catalog brings its own parser
and this reads the folder for all of them, so a broken file is reported the same way
wherever it is.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, TypeVar


class CatalogError(ValueError):
    """A manifest is missing, unknown or malformed."""


class _HasId(Protocol):
    @property
    def id(self) -> str: ...


ManifestT = TypeVar("ManifestT", bound=_HasId)


def load_manifest_folder(
    folder: Path,
    parse: Callable[[dict[str, Any], str], ManifestT],
    *,
    what: str = "model",
    name_of: Callable[[Path], str] = lambda path: path.name,
    unique: bool = True,
) -> dict[str, ManifestT]:
    """Every `*.json` in `folder` (none when it does not exist), parsed by
    `parse(raw, origin)`, in file-name order.

    `name_of` is how a file is named in errors and as the parser's origin: its bare name for
    the folders shipped with the app, its full path for a user's folder (which they may not
    know). With `unique`, an id used by two files is an error (`what` names the id's kind in
    that message); without it the later file wins. Raises CatalogError.
    """
    found: dict[str, ManifestT] = {}
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        origin = name_of(path)
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise CatalogError(f"{origin}: not valid JSON ({exc})") from exc
        manifest = parse(raw, origin)
        if unique and manifest.id in found:
            raise CatalogError(f"{origin}: {what} id {manifest.id!r} is used twice")
        found[manifest.id] = manifest
    return found
