"""No dangling references in the documentation (issue 25): every path of the repository that
README.md, ARCHITECTURE.md, installer/README.md and docs/*.md name exists. A path is named as
it is (`app/wire/client.py`, `tests/remote`, a glob such as `models/*.json`) or as a module's
attribute (`app/engine/device.survey_devices()`: the module app/engine/device.py).

The same for the signposts in the code (issue 36): the files that docstrings and comments
under app/ name exist. There a name is a path from the repository's root as above, or a
Python file named as a reader beside the code would look for it:
- from the folder the docstring stands in, or one above it (`columns.py` in app/engine/,
  `engine/local_engine.py` anywhere under app/);
- or by the end of its path, where that names exactly one file under app/ (`architectures.py`
  from app/plan/ is app/checkpoints/architectures.py; a bare `events.py` from outside a
  folder that has one names none: there are several);
- or, for a path into moshi's package (`moshi/models/compression.py`), in the moshi installed.
Files of other projects are named in FOREIGN_FILES with whose they are; URLs are not paths."""

from __future__ import annotations

import ast
import importlib.util
import io
import re
import tokenize
from functools import cache
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


# --- The code's signposts -------------------------------------------------------------------

CODE = sorted((ROOT / "app").rglob("*.py"))
# Files the code names that live in another project's repository, by whose they are.
FOREIGN_FILES = {
    "evaluate_tool_calls.py": "Full-Duplex-Bench's v3 evaluator",
    "evaluate_pass_rate.py": "Full-Duplex-Bench's v3 evaluator",
    "analyze_tool_latency.py": "Full-Duplex-Bench's v3 evaluator",
    "v3/lk_agent_tool.py": "Full-Duplex-Bench's v3 agent",
    "docs/api.md": "Ollama's API reference (github.com/ollama/ollama)",
}
_URL = re.compile(r"\b(?:https?://|github\.com/)\S*")
# A path the line breaks after its slash continues on the next line (after a comment's `#`).
_BROKEN_PATH = re.compile(r"(?<=[\w-]/)[ \t]*\n[ \t]*#?[ \t]*")
_PYTHON_FILE = re.compile(r"(?<![\w./-])([\w./-]*[\w-]\.py)\b")


def _code_texts(source: str) -> list[str]:
    """A module's docstrings (module, class, function) and its comments, each as one text."""
    tree = ast.parse(source)
    texts = [docstring for node in ast.walk(tree)
             if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
             and (docstring := ast.get_docstring(node, clean=False))]
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    comments = [token.string for token in tokens if token.type == tokenize.COMMENT]
    return [*texts, "\n".join(comments)]


def _named_in_code(file: Path) -> set[str]:
    named: set[str] = set()
    for text in _code_texts(file.read_text(encoding="utf-8")):
        text = _BROKEN_PATH.sub("", _URL.sub(" ", text))
        for pattern in (_NAMED_PATH, _PYTHON_FILE):
            named |= {m.group(1).rstrip(".,:;)") for m in pattern.finditer(text)}
    return named


@cache
def _app_files() -> tuple[str, ...]:
    return tuple(str(path.relative_to(ROOT)) for path in CODE)


@cache
def _moshi_root() -> Path | None:
    spec = importlib.util.find_spec("moshi")  # finds the package without importing it
    return Path(spec.origin).parents[1] if spec and spec.origin else None


def _found_from(file: Path, named: str) -> bool:
    if named in FOREIGN_FILES or _exists(named):
        return True
    if any((folder / named).exists() for folder in file.parents if ROOT in folder.parents):
        return True
    if named.endswith(".py") and sum(path.endswith(f"/{named}") for path in _app_files()) == 1:
        return True
    moshi = _moshi_root()
    return named.startswith("moshi/") and moshi is not None and (moshi / named).is_file()


def test_every_file_the_code_names_exists() -> None:
    dangling = [f"{file.relative_to(ROOT)}: {named}" for file in CODE
                for named in sorted(_named_in_code(file)) if not _found_from(file, named)]
    assert not dangling, "names of files that do not exist:\n" + "\n".join(dangling)


def test_the_code_pattern_finds_the_files_docstrings_and_comments_name() -> None:
    """Guards the guard: the engine's docstring names its files, a comment breaks a path over
    two lines, and a name in a URL is not a path."""
    assert {"local_engine.py", "columns.py", "lm_runtime.py"} <= _named_in_code(
        ROOT / "app" / "engine" / "__init__.py")
    assert "app/tools/mcp/content.py" in _named_in_code(ROOT / "app" / "tools" / "base.py")
    assert not any("github" in named for named in _named_in_code(
        ROOT / "app" / "ui" / "gui_thread_gc.py"))


def test_the_code_check_tells_a_stale_pointer_from_a_good_one() -> None:
    engine = ROOT / "app" / "engine" / "__init__.py"
    assert _found_from(engine, "local_engine.py")
    assert _found_from(ROOT / "app" / "plan" / "footprint.py", "architectures.py")
    assert not _found_from(engine, "frame_loop.py")
    assert not _found_from(ROOT / "app" / "ui" / "app.py", "events.py")  # several; none here
    assert _found_from(engine, "moshi/models/compression.py")
    assert not _found_from(engine, "moshi/models/no_such_file.py")


def test_every_foreign_file_is_still_named() -> None:
    """A foreign name no docstring names any more leaves the list."""
    named = set().union(*(_named_in_code(file) for file in CODE))
    assert set(FOREIGN_FILES) - named == set()
