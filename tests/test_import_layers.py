"""The packages of app/ stand in layers, and a lower layer never imports a higher one.

    base (app/*.py, settings) → checkpoints, audio, wire → engine, asr, llm, tools, remote
    → orchestrator, training, plan → conversation → ui, server, eval, bench, cli

`remote` is an engine for the conversation (the speech model on a server); `wire` is the
protocol it shares with the server; `plan` (what fits and keeps up) reads the engine, the
recogniser and the LLM side, and none of them reads it. Within a layer a package may import
another, as long as the packages form no loop. Qt is imported only under app/ui/ and by the
evaluation's offscreen chart. Every import counts, also one inside a function or under
TYPE_CHECKING: each is a dependency a reader has to know about.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

APP = Path(__file__).resolve().parent.parent / "app"
BASE = "(base)"  # the modules directly under app/ (frames, paths, audio files, logging, ...)
LAYERS: tuple[frozenset[str], ...] = tuple(frozenset(names) for names in (
    {BASE, "settings"},
    {"checkpoints", "audio", "wire"},
    {"engine", "asr", "llm", "tools", "remote"},
    {"orchestrator", "training", "plan"},
    {"conversation"},
    {"ui", "server", "eval", "bench", "cli"},
))
QT_ALLOWED = ("ui/", "eval/chart.py")


def _package_of(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "app" or len(parts) == 1:
        return None
    return parts[1] if (APP / parts[1]).is_dir() else BASE


def _imports(path: Path) -> list[tuple[str, int]]:
    """(module, line) for every absolute import in the file, at any depth."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.module, node.lineno))
            # `from app import frames` names a module, not a package's attribute
            if node.module == "app":
                found += [(f"app.{alias.name}", node.lineno) for alias in node.names]
    return found


def _source_package(path: Path) -> str:
    relative = path.relative_to(APP).parts
    return relative[0] if len(relative) > 1 else BASE


def _layer(package: str) -> int:
    for index, layer in enumerate(LAYERS):
        if package in layer:
            return index
    raise AssertionError(f"app/{package} is in no layer: add it to LAYERS in {__file__}")


def _package_graph() -> dict[str, dict[str, list[str]]]:
    """package -> imported package -> the places ("file:line") it is imported."""
    graph: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for path in sorted(APP.rglob("*.py")):
        source = _source_package(path)
        for module, line in _imports(path):
            target = _package_of(module)
            if target is not None and target != source:
                graph[source][target].append(f"{path.relative_to(APP.parent)}:{line}")
    return graph


def package_loops(graph: dict[str, dict[str, list[str]]]) -> list[list[str]]:
    """The strongly connected groups of more than one package (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    loops: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, {}):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                loops.append(sorted(group))

    nodes = set(graph) | {t for targets in graph.values() for t in targets}
    for node in sorted(nodes):
        if node not in index:
            visit(node)
    return loops


def test_every_package_is_in_a_layer():
    packages = {p.name for p in APP.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    for package in sorted(packages | {BASE}):
        _layer(package)


def test_no_lower_layer_imports_a_higher_one():
    upward = []
    for source, targets in sorted(_package_graph().items()):
        for target, places in sorted(targets.items()):
            if _layer(target) > _layer(source):
                upward.append(f"{source} imports {target} (higher) at {', '.join(places)}")
    assert not upward, "\n".join(upward)


def test_the_packages_form_no_import_loop():
    graph = _package_graph()
    loops = package_loops(graph)
    described = []
    for loop in loops:
        edges = [f"  {a} -> {b} at {graph[a][b][0]}" for a in loop for b in loop
                 if b in graph.get(a, {})]
        described.append(" / ".join(loop) + "\n" + "\n".join(edges))
    assert not loops, "\n".join(described)


def test_the_loop_finder_finds_a_loop():
    """The check above can fail: a made-up graph with one loop of three and a tail."""
    graph = {"a": {"b": ["x"]}, "b": {"c": ["x"]}, "c": {"a": ["x"], "d": ["x"]}}
    assert package_loops(graph) == [["a", "b", "c"]]  # type: ignore[arg-type]


def test_qt_is_imported_only_by_the_user_interface():
    outside = []
    for path in sorted(APP.rglob("*.py")):
        relative = path.relative_to(APP).as_posix()
        if relative.startswith(QT_ALLOWED):
            continue
        for module, line in _imports(path):
            if module.split(".")[0] in ("PySide6", "shiboken6"):
                outside.append(f"app/{relative}:{line} imports {module}")
    assert not outside, "\n".join(outside)
