"""The command line's own manners, as a user meets them (child processes): usage errors,
`--version`, `--help`, and no Qt abort on a machine without a display."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
BENCH_KINDS = ("injection", "pipeline", "audio-latency", "echo", "soak", "gpu", "server")


def main_py(*args: str, data_dir: Path, env: dict[str, str] | None = None,
            drop: tuple[str, ...] = (), timeout: float = 120) -> subprocess.CompletedProcess:
    child_env = {k: v for k, v in os.environ.items() if k not in drop}
    child_env.update(env or {}, CONTEXTSPAN_DATA_DIR=str(data_dir))
    return subprocess.run([sys.executable, "main.py", *args], cwd=REPO_ROOT, env=child_env,
                          capture_output=True, text=True, timeout=timeout)


def test_bench_without_a_kind_names_every_kind_and_is_a_usage_error(tmp_path):
    result = main_py("bench", data_dir=tmp_path)
    assert result.returncode == 2, result.stderr
    assert len(result.stderr.splitlines()) == 1
    for kind in BENCH_KINDS:
        assert kind in result.stderr


def test_version_prints_the_package_version(tmp_path):
    result = main_py("--version", data_dir=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"ContextSpan {importlib.metadata.version('contextspan')}"


def test_help_says_that_no_command_opens_the_app_and_where_the_log_is(tmp_path):
    result = main_py("--help", data_dir=tmp_path, env={"COLUMNS": "300"})
    assert result.returncode == 0, result.stderr
    text = " ".join(result.stdout.split())
    assert "Without a command it opens the desktop app" in text
    assert "none of the commands below opens it" in text
    assert "--version" in text and "--debug" in text and "download" in text
    assert str(tmp_path / "logs" / "contextspan.log") in text


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux display servers")
def test_no_display_is_one_line_that_says_what_to_do_not_a_qt_abort(tmp_path):
    result = main_py(data_dir=tmp_path, drop=("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM"))
    assert result.returncode == 1, (result.returncode, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: no display")
    assert "xvfb-run python main.py" in lines[0] and "run, bench, download" in lines[0]
    assert "xcb" not in result.stderr
