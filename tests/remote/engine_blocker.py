"""A Python process as the thin client's install sees the world: what only the `engine` extra
brings (torch, moshi, bitsandbytes, ...) cannot be imported. A `sitecustomize.py` on
PYTHONPATH puts a meta-path finder first that refuses them with the ModuleNotFoundError a
venv without them gives, so one venv proves the client's code never imports them.

Blocked are the engine extra's distributions that the core dependencies do not bring
themselves (pip would install those in the client's venv too), found from the installed
packages' own metadata, and the MLX ones."""

from __future__ import annotations

import os
import re
import sys
from importlib.metadata import PackageNotFoundError, packages_distributions, requires
from pathlib import Path

from packaging.requirements import Requirement

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: pip carries the same parser
    from pip._vendor import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
ALWAYS_BLOCKED = ("mlx", "moshi_mlx")

_SITECUSTOMIZE = '''"""Written by tests/remote/engine_blocker.py: no engine here."""
import sys

BLOCKED = {blocked!r}


class _EngineBlocker:
    def find_spec(self, name, path=None, target=None):
        top = name.partition(".")[0]
        if top in BLOCKED:
            raise ModuleNotFoundError(f"No module named {{top!r}} (the thin client's install "
                                      "has no engine)", name=top)
        return None


sys.meta_path.insert(0, _EngineBlocker())
'''


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _core_closure(requirements: list[str]) -> set[str]:
    """Every distribution the core dependencies bring, transitively (markers evaluated for
    this machine, no extras)."""
    seen: set[str] = set()
    todo = [Requirement(r) for r in requirements]
    while todo:
        requirement = todo.pop()
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        name = _normalise(requirement.name)
        if name in seen:
            continue
        seen.add(name)
        try:
            todo += [Requirement(r) for r in requires(requirement.name) or []]
        except PackageNotFoundError:
            continue
    return seen


def engine_only_modules() -> tuple[str, ...]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    core = _core_closure(list(project["dependencies"]))
    engine = {_normalise(Requirement(r).name) for r in project["optional-dependencies"]["engine"]}
    blocked_distributions = engine - core
    modules = set(ALWAYS_BLOCKED)
    for module, owners in packages_distributions().items():
        if {_normalise(o) for o in owners} & blocked_distributions and module.isidentifier():
            modules.add(module)
    return tuple(sorted(modules))


def write_blocker(folder: Path) -> Path:
    """The folder holding the blocking sitecustomize.py (put it first on PYTHONPATH)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(
        _SITECUSTOMIZE.format(blocked=engine_only_modules()), encoding="utf-8")
    return folder


def client_env(blocker: Path, **extra: str) -> dict[str, str]:
    """The environment of a thin-client process: the blocker first, then the checkout."""
    env = {**os.environ, **extra}
    env["PYTHONPATH"] = os.pathsep.join([str(blocker), str(ROOT)])
    env.setdefault("QT_QPA_PLATFORM", "offscreen")
    return env
