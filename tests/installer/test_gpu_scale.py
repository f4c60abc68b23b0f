"""installer/device/gpu_scale.sh, the one script a lent CUDA machine runs for issue 20: its
dry mode (DRY=1) runs the same steps on this CPU with the tiny checkpoints and small sizes,
and leaves in $OUT what the device tool brings back (8 files at most)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "installer" / "device" / "gpu_scale.sh"


def test_the_script_parses():
    result = subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr


def test_the_dry_run_profiles_benches_blocks_slots_and_a_baseline_into_out(
        tmp_path, tiny_cs_folder, data_dir):
    """With a baseline engine carried (fetch_baseline.sh's copy of a commit: here HEAD),
    the script also benches it, beside this tree's numbers."""
    baseline = tmp_path / "baseline"
    fetched = subprocess.run(["bash", "installer/device/fetch_baseline.sh", "HEAD"], cwd=ROOT,
                             env={**os.environ, "BASELINE": str(baseline)},
                             capture_output=True, text=True, timeout=120)
    assert fetched.returncode == 0, fetched.stderr
    assert (baseline / "app" / "engine").is_dir() and (baseline / "COMMIT").is_file()
    out = tmp_path / "out"
    env = {**os.environ, "DRY": "1", "OUT": str(out), "PYTHON": sys.executable,
           "CONTEXTSPAN_DATA_DIR": str(data_dir), "OMP_NUM_THREADS": "1",
           "BASELINE": str(baseline)}
    result = subprocess.run(["bash", str(SCRIPT)], cwd=ROOT, env=env, capture_output=True,
                            text=True, timeout=1200)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    files = sorted(p.name for p in out.iterdir())
    assert files == ["baseline_bench.json", "gpu_bench.json", "gpu_bench.log", "gpu_scale.log",
                     "profile.json", "profile_block.txt", "profile_step.txt",
                     "trace_block.json"]
    baseline = json.loads((out / "baseline_bench.json").read_text())
    assert [row["n"] for row in baseline["blocks"]] == [8] and baseline["step_ms"] > 0
    assert len(files) <= 8 and all(p.stat().st_size < 16 * 2**20 for p in out.iterdir())
    profile = json.loads((out / "profile.json").read_text())
    assert profile["block"] == 16 and profile["wall_ms"]["block_plus_step"] > 0
    assert profile["weights"]["temporal_bytes"] > 0
    assert "Name" in (out / "profile_block.txt").read_text()  # the kernel table's header
    bench = json.loads((out / "gpu_bench.json").read_text())
    assert [row["n"] for row in bench["blocks"]] == [4, 8]
    assert [row["slots"] for row in bench["slots"]["rows"]] == [1, 2]
    log = (out / "gpu_bench.log").read_text()
    assert log.count("slots {") == 2  # each slot count's row, as it was done
    assert "== done in" in (out / "gpu_scale.log").read_text()
