"""No dangling references in the documentation (issue 25): every path of the repository that
README.md, ARCHITECTURE.md, installer/README.md and docs/*.md name exists. A path is named as
it is (`app/wire/client.py`, `tests/remote`, a glob such as `models/*.json`) or as a module's
attribute (`app/engine/device.survey_devices()`: the module app/engine/device.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = sorted([ROOT / "README.md", ROOT / "ARCHITECTURE.md", ROOT / "installer" / "README.md",
                    *(ROOT / "docs").glob("*.md")])
_NAMED_PATH = re.compile(r"(?<![\w./-])((?:app|tests|docs|installer|models|assets|\.ci)/[\w./*-]+)")


def _exists(named: str) -> bool:
    if "*" in named:
        return any(ROOT.glob(named))
    if (ROOT / named).exists():
        return True
    module, _, attribute = named.rpartition(".")  # app/engine/device.survey_devices
    return bool(attribute) and "/" not in attribute and (ROOT / f"{module}.py").is_file()


def _named(document: Path) -> set[str]:
    text = document.read_text(encoding="utf-8")
    return {m.group(1).rstrip(".,:;)") for m in _NAMED_PATH.finditer(text)}


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda d: str(d.relative_to(ROOT)))
def test_every_path_a_document_names_exists(document: Path) -> None:
    assert sorted(p for p in _named(document) if not _exists(p)) == []


def test_the_pattern_finds_the_paths_the_documents_name() -> None:
    """Guards the guard: ARCHITECTURE.md's table names dozens of files."""
    assert {"app/conversation/config.py", "tests/test_event_lines.py"} <= _named(
        ROOT / "ARCHITECTURE.md")
