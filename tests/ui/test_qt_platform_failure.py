"""Issue 28, item 13: when Qt's xcb platform plugin cannot load, the terminal says which
library is missing and the one command that installs it (it said only "Reinstalling the
application may fix this problem" and "Aborted", exit 134; the line naming the library was in
the log alone).

The app runs as a user starts it (`python main.py`) in a child process asked for xcb
(`QT_QPA_PLATFORM=xcb`) with a display that does not exist. The plugin's libraries are
looked up here with `ldd` on its file, independently of the app: on this machine
libxcb-icccm4 and libxcb-keysyms1 are not installed (notes/test-infra.md), so the real plugin
cannot load for want of them; on a machine that has them, it loads and cannot reach the
display, and the message says that instead. A copy of the plugin in a folder of its own
cannot find its own Qt library (it is found next to the plugin's folder): that path is
taken on every machine.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]


def _real_plugin() -> Path:
    from PySide6.QtCore import QLibraryInfo

    plugins = Path(QLibraryInfo.path(QLibraryInfo.LibraryPath.PluginsPath))
    return plugins / "platforms" / "libqxcb.so"


def _not_found(plugin: Path) -> list[str]:
    ldd = shutil.which("ldd")
    assert ldd is not None, "this test reads the plugin's libraries with ldd"
    listed = subprocess.run([ldd, str(plugin)], capture_output=True, text=True,
                            timeout=30).stdout
    return list(dict.fromkeys(m.group(1) for m in re.finditer(r"(\S+) => not found", listed)))


def _start_the_app(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {key: value for key, value in os.environ.items()
                   if key not in ("QT_QPA_PLATFORM", "WAYLAND_DISPLAY", "QT_DEBUG_PLUGINS")}
    environment.update({"QT_QPA_PLATFORM": "xcb", "DISPLAY": ":77",
                        "CONTEXTSPAN_DATA_DIR": str(tmp_path / "data"),
                        "CONTEXTSPAN_CONFIG_DIR": str(tmp_path / "config"),
                        "PULSE_SERVER": "unix:/nonexistent", **env})
    return subprocess.run([sys.executable, "main.py"], cwd=REPO_ROOT, env=environment,
                          capture_output=True, text=True, timeout=300)


def test_a_missing_xcb_library_is_named_with_the_command_that_installs_it(tmp_path):
    missing = _not_found(_real_plugin())
    result = _start_the_app(tmp_path)
    said = result.stderr
    assert result.returncode == 1, (result.returncode, said)  # an error, not an abort (134)
    assert "Reinstalling the application may fix this problem" not in said
    if missing:  # this machine: libxcb-icccm.so.4 and libxcb-keysyms.so.1
        for library in missing:
            assert library in said, said
        packages = [re.sub(r"\.so\.(\d+)$", r"\1", name) for name in missing]
        command = next(line.strip() for line in said.splitlines() if "apt-get install" in line)
        assert command == "sudo apt-get install " + " ".join(packages), said
    else:  # the libraries are there: the display is what is missing
        assert "could not connect to the display :77" in said, said


def test_qt_debug_plugins_shows_qts_own_lines_on_the_terminal(tmp_path):
    """installer/README.md's tip: with QT_DEBUG_PLUGINS=1, Qt's plugin lines reach the terminal too
    (they went to the log alone)."""
    result = _start_the_app(tmp_path, QT_DEBUG_PLUGINS="1")
    assert "qt.qpa.plugin" in result.stderr, result.stderr
    assert result.returncode == 1


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="xcb is Linux's")
def test_a_plugin_without_its_own_qt_library_says_to_reinstall_pyside(tmp_path):
    platforms = tmp_path / "plugins" / "platforms"
    platforms.mkdir(parents=True)
    shutil.copy2(_real_plugin(), platforms / "libqxcb.so")
    assert "libQt6XcbQpa.so.6" in _not_found(platforms / "libqxcb.so")
    result = _start_the_app(tmp_path, QT_QPA_PLATFORM_PLUGIN_PATH=str(platforms))
    assert result.returncode == 1, result.stderr
    assert "libQt6XcbQpa.so.6" in result.stderr
    assert "pip install --force-reinstall PySide6-Essentials" in result.stderr
