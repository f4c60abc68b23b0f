"""installer/device/gpu_run.sh, the one script the next lent CUDA machine runs (issues 33 and
34): its dry mode (DRY=1) runs the same steps on this CPU with the tiny checkpoints and small
sizes, and leaves in $OUT what the device tool brings back (8 files at most), each step's
figures as JSON lines, kept even when a step is cut short by its time limit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "installer" / "device" / "gpu_run.sh"


def _figures(path: Path, kind: str) -> list[dict]:
    lines = [json.loads(line) for line in path.read_text().splitlines()
             if line.startswith('{"figure"')]
    return [line for line in lines if line["figure"] == kind]


def _result(path: Path) -> dict:
    """The bench's own JSON object: the file's last line."""
    return json.loads(path.read_text().splitlines()[-1])


def test_the_script_parses():
    result = subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr


def _run(tmp_path: Path, data_dir: Path, **env: str) -> tuple[subprocess.CompletedProcess, Path]:
    out = tmp_path / "out"
    result = subprocess.run(
        ["bash", str(SCRIPT)], cwd=ROOT, capture_output=True, text=True, timeout=1800,
        env={**os.environ, "DRY": "1", "OUT": str(out), "PYTHON": sys.executable,
             "CONTEXTSPAN_DATA_DIR": str(data_dir), "OMP_NUM_THREADS": "1", **env})
    return result, out


def test_the_dry_run_measures_blocks_slots_precisions_and_the_profile_into_out(
        tmp_path, tiny_cs_folder, data_dir):
    result, out = _run(tmp_path, data_dir)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    files = sorted(p.name for p in out.iterdir())
    assert files == ["blocks.jsonl", "precision.jsonl", "profile.json", "profile_block.txt",
                     "profile_step.txt", "run.log", "slots.jsonl"]
    assert all(p.stat().st_size < 16 * 2**20 for p in out.iterdir())
    # blocks: the step and each block as measured, then the bench's whole result
    assert _figures(out / "blocks.jsonl", "step")[0]["step_ms"] > 0
    assert [f["n"] for f in _figures(out / "blocks.jsonl", "block")] == [4, 8]
    assert [row["n"] for row in _result(out / "blocks.jsonl")["blocks"]] == [4, 8]
    # slots: every count's row as it was measured, the stock anchor beside those holding
    rows = [f for f in _figures(out / "slots.jsonl", "slots") if "frames" in f or "error" in f]
    assert [row["slots"] for row in rows] == [1, 2, 3][:len(rows)] and rows
    for row in rows:
        assert "error" in row or row["kv_per_slot_gb"] > 0
    anchors = [f for f in _figures(out / "slots.jsonl", "slots") if "stock" in f]
    ran = [r["slots"] for r in rows if "error" not in r]
    assert [a["slots"] for a in anchors] == ran
    recognisers = [f for f in _figures(out / "slots.jsonl", "slots") if "asr" in f]
    assert [r["asr"]["rows"] for r in recognisers] == ran
    # until the first count that missed the frame (a loaded CPU may miss at any count)
    missed = [r["slots"] for r in rows if not r.get("holds_frame")]
    assert not missed or rows[-1]["slots"] == missed[0]
    precision = _result(out / "precision.jsonl")
    assert precision  # the precision bench's result
    profile = json.loads((out / "profile.json").read_text())
    assert profile["block"] == 16 and profile["wall_ms"]["block_plus_step"] > 0
    assert "== done in" in (out / "run.log").read_text()


def test_a_step_cut_short_is_said_and_the_steps_after_it_run(tmp_path, tiny_cs_folder,
                                                            data_dir):
    """The slots step killed by its time limit (1 s): the script says so and fails, and the
    steps after it still run and keep their figures."""
    result, out = _run(tmp_path, data_dir, SLOTS_TIMEOUT="1", BLOCKS_TIMEOUT="600")
    assert result.returncode != 0  # a step was cut short: the script says so
    log = (out / "run.log").read_text()
    assert "== slots: exit 124" in log
    assert "== precision: exit 0" in log and (out / "profile.json").is_file()
    assert [f["n"] for f in _figures(out / "blocks.jsonl", "block")] == [4, 8]


@pytest.mark.slow
def test_compile_1_measures_the_compiled_step_beside_the_blocks(tmp_path, tiny_cs_folder,
                                                                 data_dir):
    """COMPILE=1: after the blocks, the same bench with the step compiled (its progress, what
    it took, the step, a block), the 8th file; the later steps cut short here to keep the
    test short (their own figures are the dry run's above)."""
    result, out = _run(tmp_path, data_dir, COMPILE="1", COMPILED_TIMEOUT="900",
                       SLOTS_TIMEOUT="1", PRECISION_TIMEOUT="1", PROFILE_TIMEOUT="1")
    log = (out / "run.log").read_text()
    assert "== blocks: exit 0" in log and "== blocks_compiled: exit 0" in log, log[-3000:]
    compiled = out / "blocks_compiled.jsonl"
    said = [f["said"] for f in _figures(compiled, "compiling")]
    assert said[0].startswith("Compiling the speech model's step") and len(said) == 6
    facts = _figures(compiled, "compile")[0]
    assert len(facts["pieces"]) == 4 and facts["failures"] == {}
    assert _figures(compiled, "step")[0]["step_ms"] > 0
    assert [f["n"] for f in _figures(compiled, "block")] == [8]
    assert _result(compiled)["compile"]["pieces"] == facts["pieces"]
    assert len(list(out.iterdir())) <= 8
