"""Shared fixtures: the tiny checkpoint, built once per session by the project's own command."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

# Widgets render offscreen: CI has no display (and a developer's desktop stays untouched).
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
# torch on one thread, here and in every child process the tests start (set before torch is
# imported: torch reads it once). A tiny model's step is many small operators; with torch's
# default of a thread a core, each waits at OpenMP's barrier for a thread whose core is busy
# elsewhere, and on a shared 2-core machine at load 5 the same tests took 5x as long (800 s
# against 149 s for test_span_injector + test_columns; app/server/threads.py says the same
# of `serve`, whose automatic rule is one thread on 2 cores anyway). A test of the thread
# choice itself sets or removes the variable.
os.environ.setdefault("OMP_NUM_THREADS", "1")

REPO_ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A private data dir, so tests never touch the user's checkpoints."""
    folder = tmp_path_factory.mktemp("contextspan-data")
    os.environ["CONTEXTSPAN_DATA_DIR"] = str(folder)
    return folder


def _build(model: str, data_dir: Path) -> Path:
    """`python main.py build MODEL` in a child process (SentencePiece training must not run
    in the test process); returns its folder in the test data dir."""
    result = subprocess.run(
        [sys.executable, "main.py", "build", model],
        cwd=REPO_ROOT,
        env={**os.environ, "CONTEXTSPAN_DATA_DIR": str(data_dir)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    return data_dir / "checkpoints" / model


@pytest.fixture(scope="session")
def tiny_folder(data_dir: Path) -> Path:
    """The tiny checkpoint, built by the project's own command."""
    folder = _build("tiny", data_dir)
    assert (folder / "config.json").is_file()
    return folder


@pytest.fixture()
def tiny_checkpoint(tiny_folder: Path):
    """A freshly loaded tiny checkpoint (float32, CPU), through the real loader."""
    from app.checkpoints.catalog import get_manifest
    from app.checkpoints.loader import load_checkpoint

    return load_checkpoint(get_manifest("tiny"), tiny_folder, device="cpu")


@pytest.fixture(scope="session")
def tiny_cs_folder(data_dir: Path) -> Path:
    """tiny-cs: the Context Spanning release's file layout at a tiny size."""
    folder = _build("tiny-cs", data_dir)
    assert (folder / "context_spanning_7b.pt").is_file()
    return folder


@pytest.fixture()
def tiny_cs_checkpoint(tiny_cs_folder: Path):
    """A freshly loaded tiny-cs checkpoint (float32, CPU), through the real loader."""
    from app.checkpoints.catalog import get_manifest
    from app.checkpoints.loader import load_checkpoint

    return load_checkpoint(get_manifest("tiny-cs"), tiny_cs_folder, device="cpu")



@pytest.fixture(autouse=True)
def garbage_collected_on_the_gui_thread(request: pytest.FixtureRequest):
    """A Qt test runs as the app does (app/ui/gui_thread_gc.py): cyclic garbage is collected
    on the GUI thread only, so a background thread never destroys a test's widgets."""
    if "qapp" not in request.fixturenames or request.node.get_closest_marker("own_collector"):
        yield
        return
    from app.ui.gui_thread_gc import GuiThreadCollector

    request.getfixturevalue("qapp")
    collector = GuiThreadCollector()
    collector.start()
    yield
    collector.stop()

