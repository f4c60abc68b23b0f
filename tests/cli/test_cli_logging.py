"""Logging (app/log_setup.py) as a user sees it: a failure is one line that names the log
and the traceback is in it; `--debug` talks on the terminal; notices, Python warnings and
Qt's own messages go to the log file, not the terminal. Child processes each time: logging
is process-wide."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import sphn

from app.llm.ollama_standin import OllamaStandIn

REPO_ROOT = Path(__file__).resolve().parents[2]


def child(*args: str, data_dir: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=REPO_ROOT,
                          env={**os.environ, "CONTEXTSPAN_DATA_DIR": str(data_dir)},
                          capture_output=True, text=True, timeout=timeout)


def log_of(data_dir: Path) -> Path:
    return data_dir / "logs" / "contextspan.log"


def test_a_failing_command_names_the_log_and_writes_its_traceback_there(tmp_path):
    result = child("main.py", "bench", "audio-latency", "--seconds", "0", data_dir=tmp_path)
    assert result.returncode == 1, result.stderr
    assert result.stderr.splitlines() == [
        f"error: --seconds must be positive (details: {log_of(tmp_path)})"]
    log = log_of(tmp_path).read_text(encoding="utf-8")
    assert "bench failed\nTraceback (most recent call last):" in log
    assert "ValueError: --seconds must be positive" in log


def test_debug_prints_debug_lines_on_the_terminal_wherever_it_stands(tmp_path):
    quiet = child("main.py", "models", data_dir=tmp_path)
    assert quiet.returncode == 0 and quiet.stderr == ""
    for args in (("--debug", "models"), ("models", "--debug")):
        loud = child("main.py", *args, data_dir=tmp_path)
        assert loud.returncode == 0, loud.stderr
        assert f"DEBUG app.log_setup: logging to {log_of(tmp_path)}" in loud.stderr
        assert "tiny" in loud.stdout
    assert "DEBUG" in log_of(tmp_path).read_text(encoding="utf-8")


def test_python_warnings_and_qt_messages_go_to_the_log_not_the_terminal(tmp_path):
    script = (
        "import logging, warnings\n"
        "from PySide6.QtCore import qWarning\n"
        "from app.log_setup import configure_logging\n"
        "from app.ui.qt_messages import install_qt_message_handler\n"
        "configure_logging()\n"
        "install_qt_message_handler()\n"
        "warnings.warn('a library grumbles', UserWarning)\n"
        "qWarning('This plugin does not support propagateSizeHints()')\n"
        "logging.getLogger('app.engine').warning('ours: shown')\n"
    )
    result = child("-c", script, data_dir=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stderr == "WARNING app.engine: ours: shown\n"
    log = log_of(tmp_path).read_text(encoding="utf-8")
    assert "py.warnings WARNING:" in log and "UserWarning: a library grumbles" in log
    assert "qt WARNING: This plugin does not support propagateSizeHints()" in log


def test_a_conversation_start_without_search_folders_says_nothing_on_the_terminal(
    tiny_folder, data_dir, tmp_path
):
    silence = tmp_path / "silence.wav"
    sphn.write_wav(str(silence), np.zeros(24000, np.float32), 24000)
    with OllamaStandIn() as standin:
        result = child(
            "main.py", "run", "--model", "tiny", "--input", str(silence),
            "--output", str(tmp_path / "reply.wav"), "--transcript", str(tmp_path / "t.jsonl"),
            "--llm", "ollama", "--llm-host", standin.url, "--llm-model", "standin:latest",
            "--tools", "local_search,calculator", data_dir=data_dir, timeout=300,
        )
    assert result.returncode == 0, result.stderr
    assert "local_search" not in result.stderr and "left out" not in result.stderr
    assert "local_search left out" in log_of(data_dir).read_text(encoding="utf-8")
