"""The span-reading proxy: its conversations are the engine's layout, its training lowers the
loss, and its evaluation runs end to end through LMGen and the injector's prefill."""

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


@pytest.fixture(scope="module")
def task_and_lm(tiny_folder):
    manifest = get_manifest("tiny")
    checkpoint = load_checkpoint(manifest, tiny_folder, device="cpu")
    lm = span_proxy.build_proxy_lm(seed=0)
    lm.eval()
    task = span_proxy.ProxyTask(checkpoint.tokenizer, lm.card, lm.text_padding_token_id,
                                manifest.span_wrapping, manifest.max_span_tokens)
    return task, lm


def test_a_streamed_episode_feeds_exactly_the_training_layout(task_and_lm, monkeypatch):
    """Audio, user question and span columns as build_layout lays them out; the text stream
    is the model's own greedy text, fed back one frame later."""
    task, lm = task_and_lm
    question = task.question(random.Random(1), pairs=2, span_frame=3, distance=5)
    assert set(question.value_ids) <= set(question.span.ids)
    fed: list[torch.Tensor] = []
    original = lm.forward_text

    def recording(sequence, *args, **kwargs):
        fed.append(sequence.clone())
        return original(sequence, *args, **kwargs)

    prefills = []
    real_prefill = span_proxy.prefill
    monkeypatch.setattr(lm, "forward_text", recording)
    monkeypatch.setattr(span_proxy, "prefill",
                        lambda gen, ids: prefills.append(len(ids)) or real_prefill(gen, ids))
    text = span_proxy.run_streams(lm, task, [[question]], span_proxy.CHUNKED, seed=4)
    monkeypatch.undo()
    inputs = torch.cat(fed, dim=2)  # [1, 17, S]
    codes, _ = span_proxy.stream_codes(task, [[question]], seed=4)
    layout = build_layout(lm, codes, [question.span])
    assert prefills == [len(question.span.ids)]  # one forward pass for the whole span
    assert torch.equal(inputs[:, 1:], layout.inputs[:, 1:])
    frames = layout.frame_positions
    assert torch.equal(inputs[0, 0, frames[1:]], text[0, :-1])  # its own text, fed back


def test_span_proxy_trains_and_evaluates_end_to_end(tiny_folder, capsys):
    argv = ["span-proxy", "--json", "--steps", "12", "--seconds", "600", "--batch-size", "4",
            "--questions", "2", "--multi-pairs", "2", "--values", "16", "--lr", "1e-2"]
    assert main_train(argv) == 0
    report = json.loads(capsys.readouterr().out)
    training = report["training"]
    assert training["steps"] == 12
    assert training["answer_loss_last"] < training["answer_loss_first"]
    ev = report["eval"]
    for key in ("chunked", "one_at_a_time", "no_span", "wrong_span", "deep"):
        assert 0.0 <= ev[key]["exact"] <= 1.0
    assert 0.0 <= ev["one_at_a_time"]["identical_tokens"] <= 1.0
    assert set(ev["distances"]) == {str(d * span_proxy.MAX_DISTANCE) for d in range(5)}
    assert ev["deep"]["window_wraps"] and ev["multi_fact"]["2"]["questions"] == 2
    assert report["threads"] >= 1 and "load_average" in report
