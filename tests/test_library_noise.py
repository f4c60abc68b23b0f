"""ALSA's messages and torch's "No CUDA runtime is found" stay off the terminal of a CPU run
and go to the log (issue 19, item 11g). Each run is a fresh process: both are printed once
per process, by C code (alsa-lib) and by torch's own handler."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from app.paths import REPO_ROOT

# What a CPU run does: alsa-lib reports an error (here: an unknown PCM, as when PortAudio
# probes devices; an underrun goes the same way), PortAudio starts, moshi's import brings
# torch.utils.cpp_extension.
TRIGGER = """
import ctypes
pcm = ctypes.c_void_p()
ctypes.CDLL("libasound.so.2").snd_pcm_open(ctypes.byref(pcm), b"no-such-pcm", 0, 0)
import sounddevice
sounddevice.query_devices()
import torch.utils.cpp_extension
"""


def _run(script: str, data_dir: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CONTEXTSPAN_DATA_DIR": str(data_dir), "CUDA_HOME": "/usr/local"}
    return subprocess.run([sys.executable, "-c", script], cwd=REPO_ROOT, env=env, text=True,
                          capture_output=True, timeout=240)


def test_without_the_handlers_both_reach_the_terminal(tmp_path) -> None:
    """The control: what the test looks for is really printed here."""
    run = _run(TRIGGER, tmp_path)
    assert run.returncode == 0, run.stderr
    assert "ALSA lib" in run.stderr and "Unknown PCM no-such-pcm" in run.stderr
    assert "No CUDA runtime is found" in run.stderr


def test_the_cli_sends_them_to_the_log_not_the_terminal(tmp_path) -> None:
    script = ("from app.cli.main import main\n"
              "assert main(['models']) == 0\n" + TRIGGER)
    run = _run(script, tmp_path)
    assert run.returncode == 0, run.stderr
    assert "ALSA" not in run.stderr, run.stderr
    assert "No CUDA runtime" not in run.stderr, run.stderr
    logged = (tmp_path / "logs" / "contextspan.log").read_text(encoding="utf-8")
    assert "snd_pcm_open_noupdate" in logged and "Unknown PCM" in logged
    assert "No CUDA runtime is found" in logged
