"""Every third-party package our code imports is declared in pyproject.toml (in the
dependencies, or in the optional extra that the importing feature needs): a package that
only arrives through another one's dependencies can vanish when that one changes."""

from __future__ import annotations

import ast
import re
import sys
from importlib.metadata import packages_distributions
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: pip carries the same parser
    from pip._vendor import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _declared() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    requirements = list(project["dependencies"])
    for extra in project.get("optional-dependencies", {}).values():
        requirements += extra
    return {_normalise(re.split(r"[\[<>=!~;\s]", r, maxsplit=1)[0]) for r in requirements}


def _installed_without_dependencies() -> set[str]:
    """What the installers add with `pip install --no-deps`, pinned in one place
    (installer/python_packages.sh: moshi_mlx, whose own pins conflict with ours)."""
    text = (ROOT / "installer" / "python_packages.sh").read_text(encoding="utf-8")
    return {_normalise(name) for name in re.findall(r'^[A-Z_]+="([A-Za-z0-9_.-]+)==', text, re.M)}


def _imported_top_levels() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for path in [ROOT / "main.py", *sorted((ROOT / "app").rglob("*.py"))]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                found.setdefault(name.split(".")[0], path)
    return found


def test_every_third_party_import_is_declared():
    distributions = packages_distributions()
    declared = _declared() | _installed_without_dependencies()
    missing = []
    for module, path in sorted(_imported_top_levels().items()):
        if module in sys.stdlib_module_names or module in {"app", "__future__"}:
            continue
        # Not installed here: an optional extra's package (declared under its own name).
        owners = {_normalise(d) for d in distributions.get(module, [])} or {_normalise(module)}
        if not owners & declared:
            missing.append(f"{module} ({', '.join(sorted(owners))}) in {path.relative_to(ROOT)}")
    assert not missing, "imported but not declared in pyproject.toml: " + "; ".join(missing)
