"""`python main.py bench gpu`, its every path on the CPU with tiny-cs (`--allow-cpu`): the
numbers it reports, the exactness twins, the graphed-against-eager replay, the refusal of a
CPU, and the saved streaming state the twins rest on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from app.bench.gpu_bench import INCLUDES, REFERENCE, _Saved, _SavedBook, run_gpu_bench
from app.moshi_internals import copy_ring, kv_rings
from tests.engine.driven import DrivenEngine

REPO_ROOT = Path(__file__).resolve().parents[2]
TOL = 1e-4  # the CPU run is float32


def main_py(*args: str, data_dir: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "main.py", *args], cwd=REPO_ROOT,
                          env={**os.environ, "CONTEXTSPAN_DATA_DIR": str(data_dir)},
                          capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def report(tiny_cs_folder) -> dict:
    return run_gpu_bench("tiny-cs", device="cpu", blocks=(4, 16), repeats=2, allow_cpu=True)


def test_every_documented_number_is_there_and_sane(report):
    assert report["model"] == "tiny-cs" and report["device"] == "cpu"
    assert report["dtype"] == "float32"  # bf16 asked, float32 on a CPU like the loader
    assert report["moshi"] == "0.2.13" and report["torch"] == torch.__version__
    assert report["device_name"] is None and report["peak_memory_gb"] is None
    assert report["cuda_graphs"] is False
    assert report["architecture"]["dep_q"] == 16
    assert report["step_ms"] > 0 and report["frame_ms"] > 0 and report["wall_s"] > 0
    assert [row["n"] for row in report["blocks"]] == [4, 16]
    for row in report["blocks"]:
        assert 0 < row["prefill_ms"] <= row["prefill_plus_step_ms"]  # one clock, one start
        assert row["over_budget"] == (row["prefill_plus_step_ms"] > report["budget_ms"])
        assert row["repeats"] == 2 and row["context_restarts"] >= 0
        assert 0 < row["max_positions"] <= report["architecture"]["context"]
    for name in ("step_ms", "frame_ms", "prefill_ms", "prefill_plus_step_ms", "over_budget",
                 "exact", "graph_replay", "peak_memory_gb", "wall_s"):
        assert INCLUDES[name] and report["includes"][name] == INCLUDES[name]
    json.dumps(report, allow_nan=False)  # strict JSON


def test_the_reference_figures_stand_beside_ours(report):
    comparison = {row["n"]: row for row in report["comparison"]}
    assert list(comparison) == [0, 16, 64, 256, 600]
    assert all(comparison[n]["reference_ms"] == ms for n, ms in REFERENCE["ms"].items())
    assert comparison[0]["ours_ms"] == report["step_ms"]
    assert comparison[16]["ours_ms"] == report["blocks"][1]["prefill_plus_step_ms"]
    assert comparison[64]["ours_ms"] is None  # not measured in this run


def test_a_block_in_one_forward_equals_one_position_at_a_time(report):
    for row in report["blocks"]:
        exact = row["exact"]
        assert exact["steps"] == 5 and exact["finite"]
        assert exact["max_abs_diff"] < TOL and exact["max_rel_diff"] < TOL
        assert exact["logit_scale"] > 0
        assert exact["text_tokens_agree"] and exact["frames_agree"]


def test_the_step_after_a_block_is_the_same_graphed_or_eager(report):
    replay = report["graph_replay"]
    assert replay["cuda_graphs"] is False  # no graphs on a CPU: both runs are eager
    assert replay["block"] == 16 and replay["steps"] == 5
    assert replay["max_abs_diff"] == 0.0
    assert replay["text_tokens_agree"] and replay["frames_agree"]


def test_a_saved_state_comes_back_in_place(tiny_cs_checkpoint):
    """The twins' ground: restoring writes into the same tensors (a CUDA graph holds their
    addresses), and the frames after it repeat exactly, even when the run in between went
    once round the KV ring and overwrote the saved keys."""
    engine = DrivenEngine(tiny_cs_checkpoint, widen=64)
    lm = engine.lm
    users = torch.randint(0, lm.card, (12, 8), generator=torch.Generator().manual_seed(1))
    engine.prefill_forced([])  # an empty start: the rows fill with live frames
    for user in users[:6]:
        engine.step(user)
    caches = kv_rings(lm)
    keys = [copy_ring(c) for c in caches]
    ring = engine.book.ring
    saved, saved_book = _Saved.take([lm]), _SavedBook.take(engine.book)

    def run() -> list:
        ids = [7] * 64
        for _ in range(lm.context // 64 + 2):  # past the ring's capacity: it wraps
            engine.read_block(ids)
            engine.step(users[0])
        return [engine.step(user).copy() for user in users[6:]]

    first = run()
    saved.restore()
    saved_book.restore()
    assert engine.book.ring is ring
    assert kv_rings(lm) == caches
    for cache, (cached, end_offset) in zip(caches, keys, strict=True):
        assert torch.equal(cache.cache, cached) and torch.equal(cache.end_offset, end_offset)
    assert all((a == b).all() for a, b in zip(first, run(), strict=True))


@pytest.mark.parametrize("model", [[], ["--model", "tiny-cs"]], ids=["7b", "tiny-cs"])
def test_the_cli_refuses_a_cpu_without_allow_cpu(tiny_cs_folder, data_dir, model):
    result = main_py("bench", "gpu", *model, "--device", "cpu", data_dir=data_dir)
    assert result.returncode == 1 and result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: bench gpu needs a CUDA GPU, and runs on cpu only with "
                               "--allow-cpu (for testing the command's paths) (details: ")


def test_the_cli_prints_one_json_object(tiny_cs_folder, data_dir):
    result = main_py("bench", "gpu", "--model", "tiny-cs", "--allow-cpu", "--block", "6",
                     "--repeats", "1", "--json", data_dir=data_dir)
    assert result.returncode == 0, result.stderr
    printed = json.loads(result.stdout)
    assert printed["bench"] == "gpu" and [row["n"] for row in printed["blocks"]] == [6]
    assert printed["blocks"][0]["exact"]["frames_agree"]


def test_the_cli_prints_a_table_without_json(tiny_cs_folder, data_dir):
    result = main_py("bench", "gpu", "--model", "tiny-cs", "--allow-cpu", "--block", "6",
                     "--repeats", "1", data_dir=data_dir)
    assert result.returncode == 0, result.stderr
    assert "tiny-cs on cpu (float32)" in result.stdout and "graphed step after" in result.stdout
    rows = [line.split() for line in result.stdout.splitlines()]
    assert any(row and row[0] == "6" for row in rows)


def test_the_precisions_refuse_a_compiled_step_rather_than_ignore_it(tiny_cs_folder, data_dir):
    """`--precision` builds each precision's engine itself, uncompiled: `--compile` beside it
    is refused, not quietly measured uncompiled."""
    result = main_py("bench", "gpu", "--model", "tiny-cs", "--allow-cpu", "--precision", "fp32",
                     "--compile", "--block", "4", "--repeats", "1", data_dir=data_dir)
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.startswith("error: bench gpu --precision chooses each precision's "
                                    "dtype itself and runs no slots and no compiled step: "
                                    "leave out --dtype, --slots and --compile"), result.stderr
