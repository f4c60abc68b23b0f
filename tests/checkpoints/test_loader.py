"""The offline checkpoint loader, exercised on the tiny checkpoint in its real layout."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import sentencepiece
import torch
from safetensors.torch import load_file

from app.checkpoints.catalog import get_manifest
from app.checkpoints.loader import (
    CheckpointMissingError,
    checkpoint_info,
    load_checkpoint,
    parse_dtype,
)
from app.checkpoints.tiny_builder import RANDOM_WEIGHTS_MARKER, tiny_lm_config

REPO_ROOT = Path(__file__).resolve().parents[2]
LEGACY_FILES = (
    "model.safetensors",
    "tokenizer-e351c8d8-checkpoint125.safetensors",
    "tokenizer_spm_32k_3.model",
)


def _assert_state_matches_file(module: torch.nn.Module, path: Path) -> None:
    on_disk = load_file(str(path))
    loaded = module.state_dict()
    assert set(loaded) == set(on_disk), (
        f"keys differ: only loaded {sorted(set(loaded) - set(on_disk))[:5]}, "
        f"only on disk {sorted(set(on_disk) - set(loaded))[:5]}"
    )
    for key, tensor in on_disk.items():
        got = loaded[key].detach().cpu()
        assert got.dtype == tensor.dtype, key
        assert got.shape == tensor.shape, key
        assert torch.equal(got, tensor), f"{key} differs from {path.name}"


def _safetensors_equal(a: Path, b: Path) -> None:
    ta, tb = load_file(str(a)), load_file(str(b))
    assert set(ta) == set(tb), a.name
    for key in ta:
        assert torch.equal(ta[key], tb[key]), f"{a.name}: {key} differs between two builds"


def _block_downloads(monkeypatch) -> list[tuple]:
    """Make every Hugging Face download entry point raise, and record attempts."""
    import huggingface_hub
    import huggingface_hub.file_download
    from moshi.models import loaders

    calls: list[tuple] = []

    def refuse(*args, **kwargs):
        calls.append((args, kwargs))
        raise AssertionError(f"hf_hub_download called with {args} {kwargs}")

    monkeypatch.setattr(loaders, "hf_hub_download", refuse)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", refuse)
    monkeypatch.setattr(huggingface_hub.file_download, "hf_hub_download", refuse)
    return calls


def _copy_tiny(tiny_folder: Path, dest: Path) -> Path:
    shutil.copytree(tiny_folder, dest)
    return dest


# --- round trip --------------------------------------------------------------------


def test_loaded_weights_equal_the_files_on_disk(tiny_checkpoint, tiny_folder: Path):
    ckpt = tiny_checkpoint
    assert ckpt.folder == tiny_folder
    assert ckpt.dtype == torch.float32
    assert ckpt.device == torch.device("cpu")
    assert Path(ckpt.info.moshi_weights) == tiny_folder / "model.safetensors"
    assert Path(ckpt.info.mimi_weights) == tiny_folder / "mimi.safetensors"
    _assert_state_matches_file(ckpt.lm, tiny_folder / "model.safetensors")
    _assert_state_matches_file(ckpt.mimi, tiny_folder / "mimi.safetensors")


def test_loaded_models_follow_the_tiny_config(tiny_checkpoint, tiny_folder: Path):
    config = json.loads((tiny_folder / "config.json").read_text())
    lm = tiny_checkpoint.lm
    assert lm.text_card == config["text_card"]
    assert lm.card == config["card"]
    assert lm.num_codebooks == config["n_q"] + 1
    assert lm.dep_q == config["dep_q"]
    assert not lm.training
    assert tiny_checkpoint.mimi.sample_rate == 24000
    assert tiny_checkpoint.mimi.frame_rate == 12.5
    tok = tiny_checkpoint.tokenizer
    assert tok.get_piece_size() == config["text_card"]
    on_disk = sentencepiece.SentencePieceProcessor(str(tiny_folder / "tokenizer.model"))
    assert tok.serialized_model_proto() == on_disk.serialized_model_proto()


def test_explicit_dtype_is_honoured(tiny_folder: Path):
    ckpt = load_checkpoint(get_manifest("tiny"), tiny_folder, dtype=torch.bfloat16)
    assert ckpt.dtype == torch.bfloat16
    assert ckpt.lm.text_emb.weight.dtype == torch.bfloat16


def test_parse_dtype_rejects_unknown_names():
    assert parse_dtype("float32") == torch.float32
    assert parse_dtype("bfloat16") == torch.bfloat16
    with pytest.raises(ValueError, match="float64"):
        parse_dtype("float64")


# --- determinism -------------------------------------------------------------------


def test_tiny_build_is_deterministic(tiny_folder: Path, tmp_path: Path):
    out = tmp_path / "tiny-again"
    result = subprocess.run(
        [sys.executable, "main.py", "build", "tiny", "--out", str(out)],
        cwd=REPO_ROOT,
        env={**os.environ, "CONTEXTSPAN_DATA_DIR": str(tmp_path / "data")},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    for name in ("model.safetensors", "mimi.safetensors"):
        _safetensors_equal(tiny_folder / name, out / name)
    for name in ("tokenizer.model", "config.json", "mimi_config.json"):
        assert (out / name).read_bytes() == (tiny_folder / name).read_bytes(), name
    assert not (tmp_path / "data" / "checkpoints").exists()  # --out means only --out


def test_a_different_seed_gives_different_weights(tiny_folder: Path, tmp_path: Path):
    # Guards the determinism test against a builder that ignores its seed entirely.
    out = tmp_path / "tiny-seed7"
    result = subprocess.run(
        [sys.executable, "main.py", "build", "tiny", "--out", str(out), "--seed", "7"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    a = load_file(str(tiny_folder / "model.safetensors"))
    b = load_file(str(out / "model.safetensors"))
    assert any(not torch.equal(a[k], b[k]) for k in a)


# --- never the network -------------------------------------------------------------


def test_loading_does_not_call_hf_hub_download(tiny_folder: Path, monkeypatch):
    calls = _block_downloads(monkeypatch)
    ckpt = load_checkpoint(get_manifest("tiny"), tiny_folder)
    assert ckpt.lm is not None and ckpt.mimi is not None
    assert calls == []


def test_loading_works_offline_in_a_fresh_process(tiny_folder: Path, tmp_path: Path):
    script = textwrap.dedent(
        f"""
        import socket

        def no_network(*args, **kwargs):
            raise OSError("network access attempted")

        socket.socket.connect = no_network
        socket.create_connection = no_network

        from pathlib import Path
        from app.checkpoints.catalog import get_manifest
        from app.checkpoints.loader import load_checkpoint

        ckpt = load_checkpoint(get_manifest("tiny"), Path({str(tiny_folder)!r}))
        print("LOADED", sum(p.numel() for p in ckpt.lm.parameters()))
        """
    )
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_HOME": str(tmp_path / "hf-home"),  # an empty cache: nothing to fall back on
        "CONTEXTSPAN_DATA_DIR": str(tmp_path / "data"),
    }
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "LOADED" in result.stdout


# --- missing files -----------------------------------------------------------------


def test_missing_folder_says_how_to_build_it(tmp_path: Path):
    folder = tmp_path / "nowhere"
    with pytest.raises(CheckpointMissingError) as info:
        load_checkpoint(get_manifest("tiny"), folder)
    message = str(info.value)
    assert str(folder) in message
    assert "python main.py build tiny" in message


def test_missing_folder_of_a_download_names_the_repo(tmp_path: Path):
    with pytest.raises(CheckpointMissingError) as info:
        checkpoint_info(get_manifest("moshiko"), tmp_path / "nowhere")
    assert "kyutai/moshiko-pytorch-bf16" in str(info.value)


@pytest.mark.parametrize(
    "missing", ["model.safetensors", "mimi.safetensors", "tokenizer.model", "mimi_config.json"]
)
def test_missing_file_is_named_with_how_to_get_it(tiny_folder: Path, tmp_path: Path, missing):
    folder = _copy_tiny(tiny_folder, tmp_path / "tiny")
    (folder / missing).unlink()
    with pytest.raises(CheckpointMissingError) as info:
        load_checkpoint(get_manifest("tiny"), folder)
    message = str(info.value)
    assert missing in message
    assert "python main.py build tiny" in message


def test_missing_file_of_a_gated_download_mentions_the_licence_and_token(tmp_path: Path):
    folder = tmp_path / "personaplex"
    folder.mkdir()
    for name in LEGACY_FILES[:2]:
        (folder / name).write_bytes(b"")
    with pytest.raises(CheckpointMissingError) as info:
        checkpoint_info(get_manifest("personaplex"), folder)
    message = str(info.value)
    assert "tokenizer_spm_32k_3.model" in message
    assert "nvidia/personaplex-7b-v1" in message
    assert "HF_TOKEN" in message


def test_invalid_config_json_is_reported(tiny_folder: Path, tmp_path: Path):
    folder = _copy_tiny(tiny_folder, tmp_path / "tiny")
    (folder / "config.json").write_text("{broken", encoding="utf-8")
    with pytest.raises(CheckpointMissingError, match="config.json"):
        checkpoint_info(get_manifest("tiny"), folder)


def test_checkpoint_missing_error_is_a_file_not_found_error(tmp_path: Path):
    with pytest.raises(FileNotFoundError):
        checkpoint_info(get_manifest("tiny"), tmp_path / "nowhere")


# --- legacy and random-weight layouts ------------------------------------------------


@pytest.mark.parametrize("model_id", ["moshiko", "moshika"])
def test_legacy_folder_without_config_uses_moshi_defaults(
    tmp_path: Path, monkeypatch, model_id: str
):
    calls = _block_downloads(monkeypatch)
    folder = tmp_path / model_id
    folder.mkdir()
    for name in LEGACY_FILES:
        (folder / name).write_bytes(b"")  # placeholders: nothing is loaded
    info = checkpoint_info(get_manifest(model_id), folder)
    assert Path(info.moshi_weights) == folder / "model.safetensors"
    assert Path(info.mimi_weights) == folder / "tokenizer-e351c8d8-checkpoint125.safetensors"
    assert Path(info.tokenizer) == folder / "tokenizer_spm_32k_3.model"
    assert info.lm_config is None  # moshi's built-in 7B configuration applies
    assert info.mimi_config is None
    assert calls == []


@pytest.mark.parametrize("model_id", ["personaplex", "context-spanning-7b"])
def test_weights_only_repositories_take_their_architecture_from_the_catalog(
    tmp_path: Path, monkeypatch, model_id: str
):
    """PersonaPlex and the Context Spanning release ship no config.json: the manifest
    names the architecture (Moshi 7B with a 16-codebook depformer) and every file."""
    calls = _block_downloads(monkeypatch)
    manifest = get_manifest(model_id)
    folder = tmp_path / model_id
    for name in manifest.files.values():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(b"")  # placeholders: nothing is loaded
    info = checkpoint_info(manifest, folder)
    assert Path(info.moshi_weights) == folder / manifest.files["moshi"]
    assert Path(info.mimi_weights) == folder / "tokenizer-e351c8d8-checkpoint125.safetensors"
    assert Path(info.tokenizer) == folder / "tokenizer_spm_32k_3.model"
    assert info.lm_config is not None and info.lm_config["dep_q"] == 16
    assert info.lm_config["n_q"] == 16 and info.lm_config["dim"] == 4096
    assert info.mimi_config is None  # moshi's own Mimi
    assert calls == []
    (folder / manifest.files["moshi"]).unlink()
    with pytest.raises(CheckpointMissingError, match=manifest.files["moshi"]):
        checkpoint_info(manifest, folder)


def test_legacy_folder_missing_a_file_names_it(tmp_path: Path):
    folder = tmp_path / "moshiko"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"")
    (folder / "tokenizer_spm_32k_3.model").write_bytes(b"")
    with pytest.raises(CheckpointMissingError) as info:
        checkpoint_info(get_manifest("moshiko"), folder)
    message = str(info.value)
    assert "tokenizer-e351c8d8-checkpoint125.safetensors" in message
    assert "kyutai/moshiko-pytorch-bf16" in message


def test_random_weight_folder_needs_no_weight_files(tiny_folder: Path, tmp_path: Path, monkeypatch):
    calls = _block_downloads(monkeypatch)
    folder = tmp_path / "random"
    folder.mkdir()
    shutil.copy(tiny_folder / "tokenizer.model", folder / "tokenizer.model")
    config = dict(tiny_lm_config())
    config.update(
        {
            "moshi_name": "model.safetensors",
            "tokenizer_name": "tokenizer.model",
            "model_type": "moshi",
            RANDOM_WEIGHTS_MARKER: True,
        }
    )
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    info = checkpoint_info(get_manifest("moshi-7b-random"), folder)
    assert Path(info.tokenizer) == folder / "tokenizer.model"
    assert info.lm_config["dim"] == config["dim"]
    assert calls == []

    (folder / "tokenizer.model").unlink()
    with pytest.raises(CheckpointMissingError, match="tokenizer.model"):
        checkpoint_info(get_manifest("moshi-7b-random"), folder)
