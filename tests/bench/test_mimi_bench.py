"""`python main.py bench mimi`: both Mimis on the tiny checkpoint, through the CLI; the codes
agree in full (the times are printed, never asserted)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mlx.core", reason="mlx does not import here (pip install mlx[cpu])")

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_bench_mimi_reports_both_mimis_and_full_agreement(tiny_folder, data_dir):
    result = subprocess.run(
        [sys.executable, "main.py", "bench", "mimi", "--model", "tiny", "--frames", "4",
         "--json"], cwd=REPO_ROOT, env={**os.environ, "CONTEXTSPAN_DATA_DIR": str(data_dir)},
        capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert (report["model"], report["frames"], report["codebooks"]) == ("tiny", 4, 8)
    assert report["code_agreement"] == 1.0
    assert report["mlx_device"] == "cpu" and report["torch_ms"] > 0 and report["mlx_ms"] > 0
