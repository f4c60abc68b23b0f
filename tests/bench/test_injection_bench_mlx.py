"""`python main.py bench injection --device mlx`, as a user runs it (child processes): the
torch bench's figures measured on the MLX engine's frame and span path, on the tiny model.
No timing is asserted, only that each figure is there and what it must be."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mlx.core", reason="mlx does not import here (pip install mlx[cpu])")

REPO_ROOT = Path(__file__).resolve().parents[2]
FIELDS = {"device", "model", "precision", "dtype", "context_window", "step_ms", "lm_step_ms",
          "budget_ms", "k", "max_k_in_budget", "torch_threads", "meaning"}


def bench(*args: str, data_dir: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "main.py", "bench", "injection", "--model", "tiny", "--device", "mlx",
         *args],
        cwd=REPO_ROOT, env={**os.environ, "CONTEXTSPAN_DATA_DIR": str(data_dir)},
        capture_output=True, text=True, timeout=300)


def test_the_mlx_bench_prints_the_torch_bench_figures_with_exact_prefill(tiny_folder,
                                                                          data_dir):
    result = bench("--k", "8", "--k", "32", "--repeats", "3", "--json", data_dir=data_dir)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert set(report) >= FIELDS
    assert report["device"] in ("mlx (cpu)", "mlx (gpu)") and report["model"] == "tiny"
    assert report["precision"] in ("fp32", "bf16") and report["context_window"] == 375
    assert report["step_ms"] > 0 and report["lm_step_ms"] > 0
    assert isinstance(report["max_k_in_budget"], int)
    assert [row["k"] for row in report["k"]] == [8, 32]
    for row in report["k"]:
        assert row["prefill_ms"] > 0 and row["sequential_ms"] > 0
        assert row["ratio"] == pytest.approx(row["sequential_ms"] / row["prefill_ms"], rel=0.01)
        # One K-position forward equals K one-position forwards, before and after the wrap.
        assert row["max_diff"] <= 1e-4 and row["max_diff_after_wrap"] <= 1e-4
    # Each figure says what it includes.
    assert {"step_ms", "lm_step_ms", "k.prefill_ms", "k.sequential_ms", "k.max_diff",
            "k.max_diff_after_wrap", "max_k_in_budget"} <= set(report["meaning"])


def test_the_text_form_names_the_precision_and_each_k(tiny_folder, data_dir):
    result = bench("--precision", "q4", "--k", "8", "--repeats", "3", "--no-wrap",
                   data_dir=data_dir)
    assert result.returncode == 0, result.stderr
    head, *rows = result.stdout.strip().splitlines()
    assert head.startswith("tiny on mlx (") and "(q4 weights)" in head
    assert "the LM step alone" in head and "max K in budget" in head
    assert len(rows) == 1 and rows[0].split()[0] == "K=" and "one forward" in rows[0]


@pytest.mark.parametrize(("args", "says"), [
    (("--dtype", "float32"), "--device mlx takes --precision"),
    (("--precision", "q8", "--device", "cpu"), "--precision is for --device mlx"),
])
def test_a_wrong_option_is_one_line_on_stderr(tiny_folder, data_dir, args, says):
    result = bench(*args, data_dir=data_dir)
    assert result.returncode != 0
    assert says in result.stderr and "Traceback" not in result.stderr
