"""`python main.py bench gpu --precision ...`: its parsing, its refusals, and every path of it
on the CPU with tiny-cs (`--allow-cpu`): one row a precision with the step, block + step,
memory and the token agreement with the first precision."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from app.bench.gpu_bench import GpuBenchError
from app.bench.precision_bench import (
    _check_runs,
    describe_precisions,
    parse_precisions,
    run_precision_bench,
)

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_the_list_is_parsed_in_order_once_each_and_unknown_names_are_refused():
    assert parse_precisions("bf16, int8,fp8,bf16") == ("bf16", "int8", "fp8")
    assert parse_precisions("bf16,fp8,int4") == ("bf16", "fp8", "int4")
    with pytest.raises(GpuBenchError, match="not int3, q8"):
        parse_precisions("bf16,int3,q8")
    with pytest.raises(GpuBenchError, match="comma-separated"):
        parse_precisions(" , ")


def test_a_cpu_is_refused_without_allow_cpu_and_fp8_where_the_gpu_has_none(tiny_cs_folder):
    with pytest.raises(GpuBenchError, match="needs a CUDA GPU"):
        run_precision_bench(("bf16",), "tiny-cs", device="cpu")
    with pytest.raises(GpuBenchError, match=r"fp8 .*8\.9"):
        _check_runs("fp8", torch.device("cpu"), allow_cpu=False)


@pytest.fixture(scope="module")
def report(tiny_cs_folder) -> dict:
    return run_precision_bench(("fp32", "int8"), "tiny-cs", device="cpu", blocks=(4, 8),
                               repeats=1, allow_cpu=True)


def test_each_precision_has_its_figures_and_its_agreement(report):
    rows = {row["precision"]: row for row in report["precisions"]}
    assert list(rows) == ["fp32", "int8"] and report["reference_precision"] == "fp32"
    for row in rows.values():
        assert row["step_ms"] > 0 and row["frame_ms"] > 0
        assert [b["n"] for b in row["blocks"]] == [4, 8]
        assert all(0 < b["prefill_ms"] <= b["prefill_plus_step_ms"] for b in row["blocks"])
        assert row["peak_memory_gb"] is None  # a CPU has no CUDA peak
        assert row["agreement_with"] == "fp32" and row["agreement"]["steps"] > 0
    assert rows["fp32"]["agreement"] == {"steps": rows["fp32"]["agreement"]["steps"],
                                         "text_tokens": 1.0, "frames": 1.0,
                                         "first_difference": None}  # the same run twice
    assert rows["fp32"]["quantized_layers"] == 0
    # a quarter of float32's bytes for the linear layers (the embeddings stay float32)
    assert rows["int8"]["quantized_layers"] > 0
    assert rows["int8"]["weights_bytes"] < 0.5 * rows["fp32"]["weights_bytes"]
    print(f"int8 against fp32 (tiny-cs, greedy): {rows['int8']['agreement']}")
    json.dumps(report, allow_nan=False)
    table = describe_precisions(report)
    assert all(f" {name} " in table for name in rows)


def test_the_command_line_runs_it(tiny_cs_folder, data_dir):
    done = subprocess.run(
        [sys.executable, "main.py", "bench", "gpu", "--precision", "fp32,fp8,int4", "--model",
         "tiny-cs", "--allow-cpu", "--block", "4", "--repeats", "1", "--json"],
        cwd=REPO_ROOT, env={**os.environ, "CONTEXTSPAN_DATA_DIR": str(data_dir)},
        capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    rows = result["precisions"]
    assert [row["precision"] for row in rows] == ["fp32", "fp8", "int4"]
    # tiny-cs's layers are 32 to 176 wide: int4 pads each row to whole groups of 128
    for row, share in zip(rows[1:], (0.5, 0.6), strict=True):
        assert row["quantized_layers"] > 0
        assert row["weights_bytes"] < share * rows[0]["weights_bytes"]
        print(f"{row['precision']} against fp32 (tiny-cs, greedy): {row['agreement']}")
    # each row was on stderr as soon as it was measured (a time limit keeps them)
    said = [line for line in done.stderr.splitlines() if line.startswith("precision {")]
    assert [json.loads(line.split(" ", 1)[1])["precision"] for line in said] == [
        "fp32", "fp8", "int4"]
    refused = subprocess.run(
        [sys.executable, "main.py", "bench", "gpu", "--precision", "bf16,q4", "--model",
         "tiny-cs", "--allow-cpu"], cwd=REPO_ROOT,
        env={**os.environ, "CONTEXTSPAN_DATA_DIR": str(data_dir)},
        capture_output=True, text=True, timeout=600)
    assert refused.returncode != 0 and "not q4" in refused.stderr
