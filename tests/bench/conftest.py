"""The tiny STT for the live benches, built by `python main.py build tiny-stt` in a child
process into the tests' private data dir (SentencePiece training must not run in here)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def tiny_stt_built(data_dir: Path) -> Path:
    result = subprocess.run([sys.executable, "main.py", "build", "tiny-stt"], cwd=REPO_ROOT,
                            env={**os.environ, "CONTEXTSPAN_DATA_DIR": str(data_dir)},
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    folder = data_dir / "checkpoints" / "tiny-stt"
    assert (folder / "config.json").is_file()
    return folder
