"""`python main.py bench gpu --slots`: conversations in one batched engine, every one talking
and a span landing somewhere every 12 frames, on the CPU with the tiny checkpoints. The
figures are checked for what they say about each other, never against a clock."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch

from app.bench.gpu_bench import describe, run_gpu_bench
from app.bench.slots_bench import drain_bound, run_slot_count, span_text
from app.frames import FRAME_MS

REPO_ROOT = Path(__file__).resolve().parents[2]
FRAMES = 13  # spans at measured frames 0 and 12


def check_rows(slots: dict, counts: list[int]) -> None:
    assert slots["counts"] == counts
    rows = slots["rows"]
    assert [row["slots"] for row in rows] == counts
    for row in rows:
        assert "error" not in row, row
        assert row["frames"] == FRAMES
        assert 0 < row["frame_ms_p50"] <= row["frame_ms_p99"] <= row["frame_ms_max"]
        assert row["tick_ms_p50"] is not None and row["tick_ms_p99"] >= row["tick_ms_p50"]
        assert row["spans_sent"] == 2 and row["spans_landed"] == 2  # one every 12 frames
        assert row["holds_frame"] == (row["frame_ms_p99"] < FRAME_MS)
        assert 0 <= row["late_frames"] <= FRAMES
        assert row["memory_per_slot_gb"] is None  # measured on CUDA only
        # every slot stepped each frame in ONE batched step: never more steps than frames
        # fed (3 warm-up, the measured, and the unmeasured ones a busy machine needs for
        # its spans to land)
        assert row["batched_steps"] <= (FRAMES + 3 + row["drain_frames"]) * row["slots"]
    holding = [row["slots"] for row in rows if row["holds_frame"]]
    assert slots["largest_holding_frame"] == (max(holding) if holding else 0)
    json.dumps(slots, allow_nan=False)


def test_the_cli_runs_slot_counts_of_the_tiny_model_on_a_cpu(tiny_folder, data_dir):
    result = subprocess.run(
        [sys.executable, "main.py", "bench", "gpu", "--model", "tiny", "--device", "cpu",
         "--allow-cpu", "--slots", "1,2", "--slot-frames", str(FRAMES), "--json",
         "--asr", "tiny-stt"],
        cwd=REPO_ROOT, env={**os.environ, "CONTEXTSPAN_DATA_DIR": str(data_dir),
                            "OMP_NUM_THREADS": "1"},
        capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["model"] == "tiny" and report["blocks"] is None  # tiny reads no blocks
    check_rows(report["slots"], [1, 2])
    for row in report["slots"]["rows"]:  # the recogniser beside each count
        assert row["asr"]["rows"] == row["slots"] and row["asr"]["frames_per_s"] > 0
        assert row["stock"]["batch"] == row["slots"] and row["stock"]["step_ms_p50"] > 0
    table = describe(report)
    assert "largest N holding the frame" in table


def test_block_figures_and_slots_of_a_block_checkpoint(tiny_cs_folder):
    report = run_gpu_bench("tiny-cs", device="cpu", blocks=(4,), repeats=1, allow_cpu=True,
                           slots=(2,), slot_frames=FRAMES)
    assert [row["n"] for row in report["blocks"]] == [4]
    check_rows(report["slots"], [2])
    # the spans went in as blocks: each one's frame said what it cost
    assert report["slots"]["rows"][0]["block_plus_tick_ms_max"] > 0


def test_every_span_lands_on_the_busiest_machine(tiny_checkpoint):
    """However busy the machine, a frame takes at least one position of a pending span: with
    the chunk limit at 1 (what the adaptive limit falls to under load), both spans of one
    slot still land in the unmeasured frames, within the bound in frames (no wall time)."""
    text = span_text(tiny_checkpoint, 64)
    row = run_slot_count(tiny_checkpoint, 1, FRAMES, 12, text, chunk_limit=1)
    assert row["spans_sent"] == 2 and row["spans_landed"] == 2
    positions = row["span_positions"]
    # One position a frame from the first measured frame, the two spans one after the other.
    assert row["drain_frames"] == 2 * positions - FRAMES
    assert row["drain_frames"] <= drain_bound(2, 1, positions)


def test_a_failing_count_is_a_row_with_its_reason_and_the_next_runs(tiny_checkpoint,
                                                                    monkeypatch):
    """Issue 33: the engine of 2 slots runs out of memory in its warm-up; that count is an
    error row saying so, at once (not after a timeout), and the counts after it run. Every
    row that runs has its memory split, its graphs and the stock anchor beside it, and each
    row reached `progress` the moment it was measured."""
    from app.bench.slots_bench import run_slots_bench
    from app.engine.local_engine import LocalEngine

    warm_up = LocalEngine._warm_up

    def out_of_memory_at_two(self) -> None:
        if self.row_count == 2:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 9.00 GiB")
        warm_up(self)

    monkeypatch.setattr(LocalEngine, "_warm_up", out_of_memory_at_two)
    seen: list[dict] = []
    result = run_slots_bench(tiny_checkpoint, (1, 2, 3), FRAMES, progress=seen.append)
    one, two, three = result["rows"]
    assert two == {"slots": 2, "holds_frame": False,
                   "error": "the speech engine failed: OutOfMemoryError: CUDA out of memory. "
                            "Tried to allocate 9.00 GiB"}
    for row in (one, three):
        assert row["kv_per_slot_gb"] > 0 and row["codec_per_slot_gb"] > 0
        assert row["rest_per_slot_gb"] is None  # measured on CUDA only
        assert row["graphs"]["step"] == 2  # the same at any count
        stock = row["stock"]
        assert stock["batch"] == row["slots"] and stock["step_ms_p50"] > 0
        assert row["frame_over_stock"] == round(row["frame_ms_p50"] / stock["step_ms_p50"], 2)
    assert (one["graphs"]["step"], one["graphs"]["reads"]) == \
        (three["graphs"]["step"], three["graphs"]["reads"])
    assert one["graphs"]["read_copy_gb"] == 0 < three["graphs"]["read_copy_gb"]
    assert [r["slots"] for r in seen if "frames" in r or "error" in r] == [1, 2, 3]
    json.dumps(result, allow_nan=False)
