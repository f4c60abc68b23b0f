"""STT manifests and the offline STT loader, on the tiny STT in the real Kyutai layout."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import sentencepiece
import torch
from safetensors.torch import load_file, save_file

from app.asr.stt_catalog import (
    EndOfSpeechHeads,
    get_stt_manifest,
    load_stt,
    load_stt_catalog,
)
from app.checkpoints.loader import CheckpointMissingError


def _assert_state_matches_file(module: torch.nn.Module, path: Path) -> None:
    on_disk = load_file(str(path))
    loaded = module.state_dict()
    assert set(loaded) == set(on_disk)
    for key, tensor in on_disk.items():
        assert torch.equal(loaded[key].detach().cpu(), tensor), f"{key} differs from {path.name}"


def _block_downloads(monkeypatch) -> list:
    import huggingface_hub
    import huggingface_hub.file_download
    from moshi.models import loaders

    calls: list = []

    def refuse(*args, **kwargs):
        calls.append((args, kwargs))
        raise AssertionError(f"hf_hub_download called with {args} {kwargs}")

    monkeypatch.setattr(loaders, "hf_hub_download", refuse)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", refuse)
    monkeypatch.setattr(huggingface_hub.file_download, "hf_hub_download", refuse)
    return calls


def test_catalog_lists_the_real_and_the_tiny_stt():
    catalog = load_stt_catalog()
    real = catalog["kyutai-stt-1b-en_fr"]
    assert real.source_kind == "huggingface"
    assert real.hf_repo == "kyutai/stt-1b-en_fr"
    assert real.files["mimi"] == "mimi-pytorch-e351c8d8@125.safetensors"
    assert real.files["tokenizer"] == "tokenizer_en_fr_audio_8000.model"
    assert real.end_of_speech.head == 2 and real.end_of_speech.threshold == 0.5
    tiny = catalog["tiny-stt"]
    assert tiny.source_kind == "built" and tiny.builder == "tiny-stt"


def test_loaded_weights_equal_the_files_on_disk(tiny_stt, tiny_stt_folder: Path):
    _assert_state_matches_file(tiny_stt.lm, tiny_stt_folder / "model.safetensors")
    _assert_state_matches_file(tiny_stt.mimi, tiny_stt_folder / "mimi.safetensors")
    on_disk = sentencepiece.SentencePieceProcessor(str(tiny_stt_folder / "tokenizer.model"))
    assert tiny_stt.tokenizer.serialized_model_proto() == on_disk.serialized_model_proto()


def test_the_stt_config_comes_from_the_checkpoint(tiny_stt, tiny_stt_folder: Path):
    config = json.loads((tiny_stt_folder / "config.json").read_text())
    assert config["model_type"] == "stt"
    assert tiny_stt.lm.dep_q == 0 and tiny_stt.lm.depformer is None
    assert tiny_stt.lm.n_q == 32 and tiny_stt.mimi.num_codebooks == 32
    assert tiny_stt.audio_delay_s == config["stt_config"]["audio_delay_seconds"] == 0.5
    assert tiny_stt.silence_prefix_s == 0.0
    assert len(tiny_stt.lm.extra_heads) == 4
    assert tiny_stt.end_of_speech is not None
    assert tiny_stt.dtype == torch.float32


def test_loading_never_reaches_the_network(tiny_stt_folder: Path, monkeypatch):
    calls = _block_downloads(monkeypatch)
    stt = load_stt(get_stt_manifest("kyutai-stt-1b-en_fr"), tiny_stt_folder)  # a real repo id
    assert stt.lm.n_q == 32
    assert calls == []


def test_a_missing_checkpoint_says_how_to_get_it(tmp_path: Path, tiny_stt_folder: Path):
    with pytest.raises(CheckpointMissingError, match="python main.py build tiny-stt"):
        load_stt(get_stt_manifest("tiny-stt"), tmp_path / "nowhere")
    partial = shutil.copytree(tiny_stt_folder, tmp_path / "partial")
    (partial / "mimi.safetensors").unlink()
    with pytest.raises(CheckpointMissingError, match="mimi.safetensors"):
        load_stt(get_stt_manifest("kyutai-stt-1b-en_fr"), partial)


def test_end_of_speech_heads_from_a_separate_weight_file(tmp_path: Path, tiny_stt_folder: Path):
    """Like kyutai/stt-1b-en_fr (no heads) beside stt-1b-en_fr-candle (same model + heads)."""
    folder = shutil.copytree(tiny_stt_folder, tmp_path / "no-heads")
    config = json.loads((folder / "config.json").read_text())
    del config["extra_heads_num_heads"], config["extra_heads_dim"]
    (folder / "config.json").write_text(json.dumps(config))
    full = load_file(str(folder / "model.safetensors"))
    save_file({k: v for k, v in full.items() if not k.startswith("extra_heads.")},
              str(folder / "model.safetensors"))
    base = get_stt_manifest("kyutai-stt-1b-en_fr")
    stt = load_stt(base, folder)
    assert stt.end_of_speech is None and len(stt.lm.extra_heads) == 0

    (folder / "end-of-speech").mkdir()
    shutil.copy(tiny_stt_folder / "model.safetensors", folder / "end-of-speech/model.safetensors")
    stt = load_stt(base, folder)
    assert stt.end_of_speech == base.end_of_speech
    assert isinstance(stt.end_of_speech, EndOfSpeechHeads)
    assert len(stt.lm.extra_heads) == 4
    _assert_state_matches_file(stt.lm, tiny_stt_folder / "model.safetensors")


def test_tiny_stt_build_is_deterministic(
    tmp_path: Path, tiny_stt_folder: Path, build_tiny_stt_child
):
    again = build_tiny_stt_child(tmp_path / "again")
    for name in ("model.safetensors", "mimi.safetensors"):
        a, b = load_file(str(tiny_stt_folder / name)), load_file(str(again / name))
        assert set(a) == set(b)
        assert all(torch.equal(a[k], b[k]) for k in a), name
    for name in ("config.json", "mimi_config.json", "tokenizer.model"):
        assert (again / name).read_bytes() == (tiny_stt_folder / name).read_bytes(), name
