"""`python main.py bench asr`, as a user runs it: one recogniser's figures for N rows, and the
1B STT's estimate beside one recogniser per slot. No timing is asserted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_one_recogniser_holds_its_weights_once_and_steps_its_rows_together(data_dir):
    result = subprocess.run(
        [sys.executable, "main.py", "bench", "asr", "--rows", "1,3", "--frames", "4", "--json"],
        cwd=REPO_ROOT, env={**os.environ, "CONTEXTSPAN_DATA_DIR": str(data_dir),
                            "OMP_NUM_THREADS": "1"},
        capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    one, three = report["measured"]
    assert (one["rows"], three["rows"]) == (1, 3)
    assert one["weights_bytes"] == three["weights_bytes"] > 0  # held once, whatever N
    # a row's state N times (a few of its tensors are not per row)
    assert 2.9 * one["state_bytes"] < three["state_bytes"] <= 3 * one["state_bytes"]
    assert one["batched_steps"] == three["batched_steps"] == 4  # every row in each step
    assert three["frames_per_s"] > 0 and one["frames_per_s"] > 0
    estimate = report["estimate"]
    assert estimate["model"] == "kyutai-stt-1b-en_fr" and estimate["weights_gb"] > 1.0
    for row in estimate["rows"]:
        assert row["one_recogniser_gb"] <= row["per_slot_recognisers_gb"]
    assert estimate["rows"][1]["per_slot_recognisers_gb"] > 2.9 * estimate["weights_gb"]
