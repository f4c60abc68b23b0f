"""Training on span-injected conversations: the loss falls, and the result is an app model."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from app.checkpoints.catalog import get_manifest, load_user_manifests, user_manifests_dir
from app.checkpoints.loader import load_checkpoint
from app.engine import events as ev
from app.engine.local_engine import open_conversation
from app.engine.speech_engine import EngineOptions
from app.frames import FRAME_SAMPLES
from app.training.cli import main_train
from app.training.trainer import TrainConfig, stack_layouts, synthetic_batches, train
from app.training.trainer import save_trained as save
from tests.queues import drain


def _one_engine_frame(checkpoint) -> list:
    engine = open_conversation(checkpoint, EngineOptions(seed=1, chunk_limit=16, warmup_frames=1))
    engine.inject("the capital of australia is canberra", "test", at_frame=0)
    engine.start()
    assert engine.push_frame(np.zeros(FRAME_SAMPLES, dtype=np.float32), 10)
    engine.finish_input()
    assert engine.join(60), "the engine thread did not end"
    return drain(engine.events)


def _same_text_logits(a, b, layout) -> bool:
    with torch.no_grad():
        _, la = a.forward_text(layout.inputs)
        _, lb = b.forward_text(layout.inputs)
    return bool((la - lb).abs().max() < 1e-4)


@pytest.fixture()
def own_data_dir(tmp_path, monkeypatch):
    """Trained models go to a private data dir: other tests' catalogs never see them."""
    monkeypatch.setenv("CONTEXTSPAN_DATA_DIR", str(tmp_path))
    return tmp_path


def test_full_finetune_lowers_the_loss_and_saves_a_model_the_app_loads(
    tiny_checkpoint, own_data_dir
):
    ck = tiny_checkpoint
    config = TrainConfig(steps=24, batch_size=4, lr=3e-3, seed=0)
    result = train(ck.lm, synthetic_batches(ck, config.batch_size, seed=0), config)
    assert not result.lora and len(result.losses) == 24
    assert result.mean_last(4) < result.mean_first(4) - 0.5, result.losses

    folder, manifest_path = save(ck, result, config, "tiny-span-test")
    raw = json.loads(manifest_path.read_text())
    assert manifest_path.parent == user_manifests_dir() == own_data_dir / "models"
    assert folder == own_data_dir / "checkpoints" / "tiny-span-test"
    assert raw["span_wrapping"] == {"open": "<system>", "close": "<system>", "trained": True}
    assert raw.get("generator", "moshi") == ck.manifest.generator
    manifest = load_user_manifests()["tiny-span-test"]
    assert manifest.default_folder() == folder
    loaded = load_checkpoint(manifest)  # the app's own loader, from the manifest alone
    layout = stack_layouts(
        [_layout(ck, batch) for batch in next(synthetic_batches(ck, 2, seed=5))],
        ck.lm.zero_token_id,
    )
    assert _same_text_logits(loaded.lm, ck.lm, layout)
    events = _one_engine_frame(loaded)
    assert not [e for e in events if isinstance(e, ev.EngineError)]
    assert len([e for e in events if isinstance(e, ev.AudioOut)]) == 1
    assert [e for e in events if isinstance(e, ev.SpanInjected)]


def _layout(ck, example):
    from app.training.span_layout import build_layout

    return build_layout(ck.lm, example.codes[None], example.spans, example.answer_frames[None])


def test_lora_saves_adapters_beside_the_base_weights_and_loads_through_moshi(
    tiny_folder, own_data_dir
):
    ck = load_checkpoint(get_manifest("tiny"), tiny_folder)
    config = TrainConfig(steps=3, batch_size=2, lr=1e-2, lora=True, lora_rank=4)
    result = train(ck.lm, synthetic_batches(ck, config.batch_size, seed=1), config)
    assert result.lora and 0 < result.trainable_params < 100_000
    folder, _ = save(ck, result, config, "tiny-lora-test")
    saved = json.loads((folder / "config.json").read_text())
    assert saved["lora"] is True and saved["lora_name"] == "lora.safetensors"
    assert saved["lora_rank"] == 4
    loaded = load_checkpoint(load_user_manifests()["tiny-lora-test"])
    example = next(synthetic_batches(ck, 1, seed=6))[0]
    assert _same_text_logits(loaded.lm, ck.lm, stack_layouts([_layout(ck, example)], -1))
    base = load_checkpoint(get_manifest("tiny"), tiny_folder)
    assert not _same_text_logits(base.lm, ck.lm, stack_layouts([_layout(ck, example)], -1))


def test_audio_loss_trains_the_depformer_on_answer_frames(tiny_folder):
    ck = load_checkpoint(get_manifest("tiny"), tiny_folder)
    config = TrainConfig(steps=1, batch_size=1, audio_loss_weight=0.5)
    result = train(ck.lm, synthetic_batches(ck, config.batch_size, seed=2), config)
    assert len(result.audio_losses) == 1
    assert all(np.isfinite(result.audio_losses))
    assert result.audio_losses[0] == pytest.approx(np.log(ck.lm.card), rel=0.5)


def test_cli_tiny_smoke_prints_json(tiny_folder, capsys):
    assert main_train(["tiny-smoke", "--steps", "4", "--batch-size", "2", "--no-save"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["steps"] == 4 and report["model"] == "tiny" and not report["lora"]
    assert np.isfinite(report["loss_first"]) and np.isfinite(report["loss_last"])
