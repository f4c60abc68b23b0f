"""The span-reading proxy: its conversations are the engine's layout, its evaluation spans are
never in training (by construction and by a check that finds them when they are), a short
run learns to read spans through LMGen and span positions read as the engine reads them,
and two runs of the same seed and step budget give the same numbers."""

from __future__ import annotations

import json
import random

import pytest
import torch

from app.checkpoints.catalog import get_manifest
from app.checkpoints.loader import load_checkpoint
from app.training import span_proxy
from app.training.cli import main_train
from app.training.span_layout import build_layout

# The short proof: one-word values (two-word values need ~900 steps to learn their order).
# 120 steps is the smallest budget tried at which with-span beat no-span on every seed 0..4
# (exact match 0.92..1.0 against 0.0..0.08; at 100 steps seed 1 read 0.25, at 80 all <= 0.25).
SHORT = ["--steps", "120", "--lr", "1e-2", "--value-words", "1", "--no-deep",
         "--no-distances", "--multi-pairs", "", "--questions", "12"]
MARGIN = 0.5  # with-span exact match above no-span (and above another episode's span)


@pytest.fixture(scope="module")
def task_and_lm(tiny_folder):
    manifest = get_manifest("tiny")
    checkpoint = load_checkpoint(manifest, tiny_folder, device="cpu")
    lm = span_proxy.build_proxy_lm(seed=0)
    lm.eval()
    task = span_proxy.ProxyTask(checkpoint.tokenizer, lm.card, lm.text_padding_token_id,
                                manifest.span_wrapping, manifest.max_span_tokens, values=16)
    return task, lm


def _run(capsys, *argv: str) -> dict:
    assert main_train(["span-proxy", "--json", *argv]) == 0
    return json.loads(capsys.readouterr().out)


def test_a_streamed_episode_feeds_exactly_the_training_layout(task_and_lm, monkeypatch):
    """Audio, user question and span columns as build_layout lays them out; the text stream
    is the model's own greedy text, fed back one frame later."""
    task, lm = task_and_lm
    question = task.question(random.Random(1), 2, span_frame=3, distance=5, split="eval")
    assert set(question.answer_ids) <= set(question.span.ids)
    fed: list[torch.Tensor] = []
    original = lm.forward_text

    def recording(sequence, *args, **kwargs):
        fed.append(sequence.clone())
        return original(sequence, *args, **kwargs)

    prefills = []
    real_read = span_proxy.read_positions
    monkeypatch.setattr(lm, "forward_text", recording)
    monkeypatch.setattr(span_proxy, "read_positions", lambda lm, ids, batch: (
        prefills.append(len(ids)) or real_read(lm, ids, batch)))
    text = span_proxy.run_streams(lm, task, [[question]], span_proxy.CHUNKED, seed=4)
    monkeypatch.undo()
    inputs = torch.cat(fed, dim=2)  # [1, 17, S]
    codes, _ = span_proxy.stream_codes(task, [[question]], seed=4)
    layout = build_layout(lm, codes, [question.span])
    assert prefills == [len(question.span.ids)]  # one forward pass for the whole span
    assert torch.equal(inputs[:, 1:], layout.inputs[:, 1:])
    frames = layout.frame_positions
    assert torch.equal(inputs[0, 0, frames[1:]], text[0, :-1])  # its own text, fed back


def _split_of(task: span_proxy.ProxyTask, fact: tuple[int, tuple[int, ...]]) -> str:
    words = {i: w for w, i in task.word_ids.items()}
    key, value_ids = fact
    return span_proxy.fact_split(span_proxy.KEY_WORDS[key], [words[i] for i in value_ids])


def test_every_fact_of_a_span_comes_from_the_split_asked_for(task_and_lm):
    task, _ = task_and_lm
    rng = random.Random(3)
    for split in span_proxy.SPLITS:
        for _ in range(50):
            q = task.question(rng, 4, 0, 0, split)
            assert {_split_of(task, f) for f in q.facts} == {split}
            words = [i for _, v in q.facts for i in v]
            assert len(set(words)) == len(words)  # a value's first word names one fact


def _ledger(task: span_proxy.ProxyTask, split: str, spans: int) -> span_proxy.SpanLedger:
    ledger = span_proxy.SpanLedger()
    batches = span_proxy.proxy_batches(task, 50, [1, 2], 1, 0, ledger)
    if split == "train":
        for _ in range(spans // 50):
            next(batches)
    else:  # what the run did before the split: training drawn from the evaluation's space
        rng = random.Random(0)
        for _ in range(spans):
            ledger.add(task.question(rng, rng.choice([1, 2]), 0, 0, split).content)
    return ledger


def test_the_overlap_check_finds_evaluation_spans_seen_in_training(task_and_lm):
    """The check itself: with training drawn from the evaluation's facts it counts most
    evaluation spans; from the training facts (as the run draws them), none."""
    task, _ = task_and_lm
    rng = random.Random(7)
    evaluation = [task.question(rng, 1, 0, 0, "eval").content for _ in range(100)]
    assert _ledger(task, "eval", 3000).occurring(evaluation) > 50
    clean = _ledger(task, "train", 3000)
    assert clean.spans == 3000 and clean.occurring(evaluation) == 0
    # Verbatim inside a longer training span counts too.
    clean.add((5, *evaluation[0], 6))
    assert clean.occurring(evaluation) == evaluation.count(evaluation[0])


def test_a_short_run_reads_spans_and_its_evaluation_spans_are_unseen(tiny_folder, capsys):
    report = _run(capsys, *SHORT)
    assert report["training"]["steps"] == 120 and report["threads"] == 1
    assert report["wall"]["train_seconds"] > 0  # reported beside the step budget
    ev = report["eval"]
    # Chunked injection (one forward pass) and one position at a time: identical tokens.
    assert ev["one_at_a_time"]["identical_streams"] == 1.0
    assert ev["one_at_a_time"]["identical_tokens"] == 1.0
    assert ev["one_at_a_time"]["exact"] == ev["chunked"]["exact"]
    # The model reads the span: without it (or with another episode's) it cannot answer.
    assert ev["chunked"]["exact"] >= ev["no_span"]["exact"] + MARGIN
    assert ev["chunked"]["exact"] >= ev["wrong_span"]["exact"] + MARGIN
    # Evaluation spans are unseen in training, checked against every training span.
    assert report["eval_overlap"] == 0
    check = report["overlap_check"]
    assert check["training_spans"] == 120 * 32
    assert check["eval_spans"] >= 2 * 12  # at least the plain and the wrong spans


def test_two_runs_of_the_same_seed_and_steps_give_identical_numbers(tiny_folder, capsys):
    """Only the `wall` section (seconds, load) may differ; another seed gives other numbers,
    so the comparison can tell."""
    tiny = ["--steps", "4", "--batch-size", "4", "--value-words", "1", "--questions", "2",
            "--multi-pairs", "2", "--episodes", "2", "--deep-from", "0.5"]
    first, second, other = (_run(capsys, *tiny, "--seed", s) for s in ("1", "1", "2"))
    for report in (first, second, other):
        report.pop("wall")
    assert first == second
    assert first["training"] != other["training"]
