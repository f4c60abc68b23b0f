"""The span-reading proxy on the MLX engine (issue 18's capability check): a short run saves
its trained LM as a checkpoint in the real layout, the MLX engine's loader converts it, and
the MLX evaluation (MlxLmGen, greedy, each span one forward through the MLX transformer and
KV ring) answers every question as torch does in fp32; q8 and q4 run and report agreement."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest
from safetensors.torch import load_file

pytest.importorskip("mlx.core", reason="mlx does not import here (pip install mlx[cpu])")

from app.checkpoints.catalog import get_manifest
from app.checkpoints.loader import load_checkpoint
from app.engine.mlx.weights import load_mlx_lm
from app.training import span_proxy
from app.training.cli import main_train

# The short proof's budget (tests/training/test_span_proxy.py: 120 steps read spans on every
# seed tried), fewer questions; two facts per span adds batched streams (B = 2).
SHORT = ["--steps", "120", "--lr", "1e-2", "--value-words", "1", "--no-deep",
         "--no-distances", "--multi-pairs", "2", "--questions", "6"]
EXACT_TOLERANCE = 0.02  # the issue's bound on MLX fp32's exact match against torch's


@pytest.fixture(scope="module")
def report_and_folder(tmp_path_factory, tiny_folder) -> tuple[dict, Path]:
    """One short run through the command, its checkpoint saved (the module's tests read it)."""
    folder = tmp_path_factory.mktemp("span-proxy") / "checkpoint"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main_train(["span-proxy", "--json", *SHORT, "--engines", "torch,mlx",
                           "--mlx-precisions", "fp32,q8,q4", "--save-checkpoint", str(folder)])
    assert code == 0
    return json.loads(out.getvalue()), folder


def test_mlx_fp32_answers_every_question_as_torch_does(report_and_folder):
    report, _ = report_and_folder
    torch_fp32 = report["engines"]["torch"]["fp32"]
    mlx = report["engines"]["mlx"]
    assert set(mlx) == {"fp32", "q8", "q4"}
    # The model read the spans (so the comparison is about reading, not about silence).
    assert torch_fp32["exact"] >= torch_fp32["no_span_exact"] + 0.5
    fp32 = mlx["fp32"]
    agreement = fp32["agreement_with_torch_fp32"]
    assert agreement["answers"] == 1.0  # every question's answer, every measure
    assert agreement["tokens"] == 1.0  # and every text token of every stream
    assert agreement["answers_compared"] >= 4 * 6 + 6  # one-fact's four runs, two-fact's
    assert abs(fp32["exact"] - torch_fp32["exact"]) <= EXACT_TOLERANCE
    # The MLX evaluation is the whole eval section, on the same (unseen) spans.
    assert fp32["eval"]["split"] == "eval" and set(fp32["eval"]) == set(report["eval"])
    assert fp32["eval"]["one_at_a_time"]["identical_tokens"] == 1.0
    assert report["eval_overlap"] == 0


def test_q8_and_q4_run_and_report_their_agreement(report_and_folder):
    report, _ = report_and_folder
    for precision in ("q8", "q4"):
        row = report["engines"]["mlx"][precision]
        for figure in ("tokens", "answers"):
            assert 0.0 <= row["agreement_with_torch_fp32"][figure] <= 1.0
        assert 0.0 <= row["exact"] <= 1.0
    assert set(report["wall"]["mlx_eval_seconds"]) == {"fp32", "q8", "q4"}
    assert "--engines torch,mlx" in report["command"]


def test_the_saved_checkpoint_is_the_trained_model_in_the_real_layout(report_and_folder):
    report, folder = report_and_folder
    assert report["checkpoint"] == str(folder)
    names = {p.name for p in folder.iterdir()}
    assert {"config.json", "model.safetensors", "mimi.safetensors", "mimi_config.json",
            "tokenizer.model"} <= names
    config = json.loads((folder / "config.json").read_text())
    assert config["context"] == span_proxy.PROXY_CONTEXT
    assert config["model_id"]["steps"] == 120
    manifest = get_manifest("tiny")
    loaded = load_checkpoint(manifest, folder, device="cpu")  # the app's torch loader
    assert loaded.lm.context == span_proxy.PROXY_CONTEXT
    saved = load_file(str(folder / "model.safetensors"))
    assert set(saved) == set(loaded.lm.state_dict())
    assert load_mlx_lm(manifest, folder).shape.context == span_proxy.PROXY_CONTEXT  # strict


def test_the_text_report_gives_a_row_per_engine_and_precision(report_and_folder):
    report, _ = report_and_folder
    text = span_proxy.describe(report)
    rows = [line.split() for line in text.splitlines()]
    engines = [(r[0], r[1]) for r in rows if r and r[0] in ("torch", "mlx")]
    assert engines == [("torch", "fp32"), ("mlx", "fp32"), ("mlx", "q8"), ("mlx", "q4")]
    assert "reference" in text and "1.0000, 1.0000" in text


@pytest.mark.parametrize(("engines", "precisions", "says"), [
    ("mlx", "fp32", "torch (always"), ("torch,jax", "fp32", "torch (always"),
    ("torch,mlx", "q3", "choose from fp32, bf16, q8, q4"), ("torch,mlx", "", "choose from"),
])
def test_engine_choices_are_checked_before_training(engines, precisions, says):
    with pytest.raises(ValueError, match=r"\(always|choose from") as error:
        span_proxy.parse_engines(engines, precisions)
    assert says in str(error.value)
    assert span_proxy.parse_engines("torch", "q3") == ()  # torch alone: precisions unread
