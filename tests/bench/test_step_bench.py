"""`python main.py bench step`: one engine step counted by part on tiny-cs, on this CPU, beside
stock moshi's LMGen on the same weights: our step launches no more operators than stock's
plus the forcing generator's teacher forcing, its depformer (in fixed slots) under half of
stock's, reads every weight of the temporal transformer once, and reads the KV rings the
engine widened for span blocks; the command prints its table and a JSON line per row; with
`--compile`, a compiled row whose temporal transformer and depformer launch fewer kernels,
reading the same weights and KV."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from app.bench.step_bench import MAX_READ, _full_width_bytes, count_model
from app.bench.step_count import PARTS

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def rows(tiny_cs_folder) -> dict[str, dict]:
    counted = count_model("tiny-cs", "fp32", torch.device("cpu"), steps=2)
    return {row["engine"]: row for row in counted}


def test_our_step_launches_no_more_than_stocks_plus_the_teacher_forcing(rows):
    ours, stock = rows["ours"], rows["stock"]
    for part in ("temporal", "sampling"):  # the same moshi modules, run alike
        assert ours["step"][part]["operators"] == stock["step"][part]["operators"], part
        assert ours["step"][part]["operators"] > 0, part
    # The depformer's steps in fixed slots: no ring bookkeeping, no mask rebuilt, no state
    # made anew each frame (app/engine/depformer_step.py); the same weights read.
    depformer = ours["step"]["depformer"]
    assert 0 < depformer["operators"] < stock["step"]["depformer"]["operators"] / 1.5
    assert depformer["weights_bytes"] == stock["step"]["depformer"]["weights_bytes"]
    # The forcing generator feeds each of the 16 codebook steps (and the text) the
    # provided code where there is one: one `where` each, 17 in all. Stock keeps its token
    # cache on the device; ours is numpy on the host, so the rest is the hand-over.
    forcing = 1 + 16
    assert ours["step_total"]["operators"] <= stock["step_total"]["operators"] + forcing
    assert ours["step"]["columns"]["by_name"].get("where", 0) <= forcing
    assert ours["step"]["mimi"]["operators"] == 0 and ours["frame"]["mimi"]["operators"] > 0
    assert ours["columns_host_us"] > 0  # the bookkeeping's host time, given apart
    print("tiny-cs step, ours / stock:", ours["step_total"], stock["step_total"])


def test_the_step_reads_each_temporal_weight_once_and_the_widened_rings(rows, tiny_cs_folder):
    from app.checkpoints.catalog import get_manifest
    from app.checkpoints.loader import load_checkpoint

    lm = load_checkpoint(get_manifest("tiny-cs"), tiny_cs_folder).lm
    temporal = {f"lm.transformer.{n}" for n, _ in lm.transformer.named_parameters()}
    temporal |= {f"lm.text_linear.{n}" for n, _ in lm.text_linear.named_parameters()}
    temporal |= {f"lm.out_norm.{n}" for n, _ in lm.out_norm.named_parameters()}
    ours = rows["ours"]
    step = ours["step"]["temporal"]
    parameter_bytes = sum(p.numel() * 4 for n, p in lm.named_parameters()
                          if f"lm.{n}" in temporal)
    rows_bytes = lm.num_codebooks * lm.dim * 4  # one row of each of the 17 tables
    assert step["weights_bytes"] == parameter_bytes + rows_bytes
    # moshi hands its attention the whole ring: context + the widening for a block
    layers, context = len(lm.transformer.layers), int(lm.context)
    ring = 2 * (context + MAX_READ - 1) * lm.dim * 4
    assert step["kv_bytes"] == layers * ring
    assert rows["stock"]["step"]["temporal"]["kv_bytes"] == layers * 2 * context * lm.dim * 4


def test_bytes_at_full_width_of_the_same_model_are_the_counted_bytes(tiny_cs_folder):
    from app.bench.step_bench import _build, _ours

    built = _build("tiny-cs", torch.device("cpu"), "fp32", seed=0)
    frame = _ours(built, 1, greedy=True, seed=0).frame
    lm = built.checkpoint.lm
    full = _full_width_bytes(frame, lm, lm, "fp32")  # "full width" = its own width
    for part in PARTS:
        assert full[part] == {"weights_bytes": frame[part].weights_bytes,
                              "kv_bytes": frame[part].kv_bytes}, part


def test_the_command_prints_its_table_and_each_row_as_counted(tiny_cs_folder, data_dir):
    done = subprocess.run(
        [sys.executable, "main.py", "bench", "step", "--model", "tiny-cs", "--steps", "1",
         "--precision", "fp32,int4"],
        cwd=REPO_ROOT, env={**os.environ, "CONTEXTSPAN_DATA_DIR": str(data_dir)},
        capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    said = [json.loads(line.split(" ", 1)[1]) for line in done.stderr.splitlines()
            if line.startswith("step {")]
    assert [(r["precision"], r["engine"]) for r in said] == [
        ("fp32", "ours"), ("fp32", "stock"), ("int4", "ours"), ("int4", "stock")]
    int4 = said[2]["step"]["temporal"]
    assert int4["by_name"].get("_weight_int4pack_mm_for_cpu", 0) > 0  # the fused product
    assert "tiny-cs / int4 / ours" in done.stdout and "temporal" in done.stdout
    print(done.stdout)


@pytest.mark.slow
def test_compiled_the_step_launches_fewer_kernels_reading_the_same_weights(
        tiny_cs_folder):
    counted = count_model("tiny-cs", "fp32", torch.device("cpu"), steps=1, greedy=True,
                          compile_step=True)
    ours, compiled = counted[0], counted[2]
    assert compiled["engine"] == "compiled" and compiled["compile"]["compiled"]
    fused = compiled["step"]["depformer"]
    assert fused["by_name"].get("fused (inductor)", 0) > 0  # its kernels, read by the profiler
    # The codebooks' sampling is inside the compiled piece: only the text's stays apart.
    eager_depformer = (ours["step"]["depformer"]["operators"]
                       + ours["step"]["sampling"]["operators"] * 16 // 17)
    assert 0 < fused["operators"] < eager_depformer / 1.5
    assert fused["weights_bytes"] == ours["step"]["depformer"]["weights_bytes"]
    assert fused["kv_bytes"] == ours["step"]["depformer"]["kv_bytes"]
    # The temporal forward compiled too: its setup, one layer for all, its end.
    temporal, eager_temporal = compiled["step"]["temporal"], ours["step"]["temporal"]
    assert temporal["by_name"].get("fused (inductor)", 0) > 0
    assert 0 < temporal["operators"] < eager_temporal["operators"] / 1.5
    assert temporal["weights_bytes"] == eager_temporal["weights_bytes"]
    assert temporal["kv_bytes"] == eager_temporal["kv_bytes"]
