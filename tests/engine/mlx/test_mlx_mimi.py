"""Mimi on MLX (app/engine/mlx/mlx_mimi.py) against torch's Mimi, streamed frame by frame.

Both read the same weights file. Encoding gives the same codes, exactly; decoding the same
codes gives PCM within PCM_TOLERANCE (float32 rounding: 2.4e-7 was the largest difference
seen on the tiny Mimi, 1.0e-7 on the full-size one). Checked on the tiny checkpoint's Mimi
(moshi 0.2's saved key names), on a tiny Mimi with a short attention context streamed past
its ring's wrap, and on a random-weight full-size Mimi saved under the released files' key
names. moshi_mlx's own `Mimi.encode_step` does not meet this (its two positions per frame
see each other): 97.5% of the tiny Mimi's codes agreed over 60 frames; see the module.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("mlx.core", reason="mlx does not import here (pip install mlx[cpu])")

from moshi.models import MimiModel, loaders
from moshi.quantization.core_vq import EuclideanCodebook
from safetensors.torch import save_file

from app.checkpoints.tiny_builder import (
    contiguous_state,
    initialise_codebooks,
    tiny_mimi_config,
)
from app.engine.mlx import frame_codec
from app.engine.mlx.frame_codec import make_frame_codec, mimi_backend
from app.engine.mlx.mlx_mimi import MimiConfigError, MlxMimi
from app.frames import FRAME_SAMPLES, SAMPLE_RATE
from app.moshi_internals import (
    capturing_codebook_inputs,
    mark_codebook_initialised,
    moshi_mimi_config,
)

PCM_TOLERANCE = 1e-5
SHORT_CONTEXT = 16  # positions at 25 Hz: the ring wraps after 8 frames


def varied_input(frames: int, seed: int = 0) -> np.ndarray:
    """A gliding tone with noise and a silent gap: codes that change every frame."""
    t = np.arange(frames * FRAME_SAMPLES) / SAMPLE_RATE
    rng = np.random.default_rng(seed)
    wave = 0.3 * np.sin(2 * np.pi * (200 + 100 * np.sin(t)) * t)
    wave += 0.05 * rng.standard_normal(len(t))
    wave[len(t) // 3 : len(t) // 3 + 2 * FRAME_SAMPLES] = 0.0
    return wave.astype(np.float32)


def stream_both(torch_mimi: MimiModel, mlx_mimi: MlxMimi, pcm: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, float]:
    """Each frame through both Mimis, streaming: (torch's codes, MLX's codes, the largest
    PCM difference of the two decoders fed torch's codes)."""
    torch_codes, mlx_codes, pcm_diff = [], [], 0.0
    with torch.no_grad(), torch_mimi.streaming(1):
        for start in range(0, len(pcm), FRAME_SAMPLES):
            frame = pcm[start : start + FRAME_SAMPLES]
            codes = torch_mimi.encode(torch.from_numpy(frame)[None, None])  # [1, 8, 1]
            torch_pcm = torch_mimi.decode(codes)[0, 0].numpy()
            torch_codes.append(codes[0, :, 0].numpy())
            mlx_codes.append(mlx_mimi.encode_frame(frame))
            mlx_pcm = mlx_mimi.decode_frame(codes[0, :, 0].numpy())
            pcm_diff = max(pcm_diff, float(np.abs(torch_pcm - mlx_pcm).max()))
    return np.array(torch_codes), np.array(mlx_codes), pcm_diff


def assert_same(torch_codes: np.ndarray, mlx_codes: np.ndarray, pcm_diff: float) -> None:
    agreement = float((torch_codes == mlx_codes).mean())
    assert agreement == 1.0, f"code agreement {agreement:.4f}"
    assert pcm_diff <= PCM_TOLERANCE
    assert len(np.unique(torch_codes)) > 10  # the codes do change: the comparison means it


def test_the_tiny_checkpoints_mimi_encodes_and_decodes_as_torch(tiny_checkpoint):
    """Through the engine's own choice (make_frame_codec), from the checkpoint's file."""
    codec = make_frame_codec(tiny_checkpoint, "mlx")
    assert isinstance(codec, MlxMimi)
    assert_same(*stream_both(tiny_checkpoint.mimi, codec, varied_input(40)))


@pytest.fixture(scope="module")
def short_context_mimi(tmp_path_factory) -> tuple[Path, dict]:
    """A tiny Mimi whose attention holds 16 positions, in moshi 0.2's saved layout, with
    no layer scale: the transformers' full weight reaches the codes and the PCM, so that an
    attention that sees one position too many or too few shows."""
    config = tiny_mimi_config()
    config["transformer"]["context"] = SHORT_CONTEXT
    config["transformer"]["layer_scale"] = None
    mimi = loaders.get_mimi(None, config, device="cpu", num_codebooks=8)
    initialise_codebooks(mimi, torch.Generator().manual_seed(5))
    path = tmp_path_factory.mktemp("short-mimi") / "mimi.safetensors"
    save_file(contiguous_state(mimi), str(path))
    return path, config


def test_streaming_past_the_attention_ring_and_after_a_reset(short_context_mimi):
    path, config = short_context_mimi
    torch_mimi = loaders.get_mimi(path, config, device="cpu", num_codebooks=8)
    mlx_mimi = MlxMimi.load(path, config, 8)
    pcm = varied_input(30)  # 60 positions: the 16-position ring wraps three times
    first = stream_both(torch_mimi, mlx_mimi, pcm)
    assert_same(*first)
    mlx_mimi.reset()  # a new conversation: the same codes as a fresh Mimi's
    again = [mlx_mimi.encode_frame(pcm[i : i + FRAME_SAMPLES])
             for i in range(0, len(pcm), FRAME_SAMPLES)]
    assert np.array_equal(np.array(again), first[1])


def test_a_random_weight_mimi_without_a_file_runs_its_torch_weights(tiny_checkpoint):
    """A random-weight checkpoint has no Mimi file: the MLX Mimi gets the torch one's."""
    mimi = loaders.get_mimi(None, tiny_mimi_config(), device="cpu", num_codebooks=8)
    initialise_codebooks(mimi, torch.Generator().manual_seed(9))
    assert_same(*stream_both(mimi, MlxMimi.from_torch(mimi, tiny_mimi_config()),
                             varied_input(12)))


def released_random_mimi(path: Path) -> None:
    """A full-size Mimi (moshi's config, 32 codebooks) with random weights, saved under the
    released file's key names (`in_proj_weight`, as tokenizer-e351c8d8-checkpoint125 has).
    Its codebooks are seeded from one encode's latents (the tiny builder's k-means-like
    seeding takes minutes at this size)."""
    generator = torch.Generator().manual_seed(0)
    mimi = loaders.get_mimi(None, None, device="cpu", num_codebooks=32)
    codebooks = [m for m in mimi.modules() if isinstance(m, EuclideanCodebook)]
    with torch.no_grad():
        with capturing_codebook_inputs() as seen:
            mimi.encode(0.1 * torch.randn(1, 1, SAMPLE_RATE, generator=generator))
        for codebook in codebooks:
            latents = seen[id(codebook)]
            rows = torch.randint(0, latents.shape[0], (codebook.codebook_size,),
                                 generator=generator)
            noise = torch.randn(codebook.embedding_sum.shape, generator=generator)
            codebook.embedding_sum.copy_(latents[rows] + 0.1 * latents.std() * noise)
            codebook.cluster_usage.fill_(1.0)
            mark_codebook_initialised(codebook)
    state = {}
    for key, value in contiguous_state(mimi).items():
        key = key.replace(".self_attn.in_projs.0.weight", ".self_attn.in_proj_weight")
        state[key.replace(".self_attn.out_projs.0.weight", ".self_attn.out_proj.weight")] = value
    save_file(state, str(path))


@pytest.mark.slow
def test_a_full_size_mimi_in_the_released_layout_encodes_and_decodes_as_torch(tmp_path):
    path = tmp_path / "tokenizer-e351c8d8-checkpoint125.safetensors"
    released_random_mimi(path)
    torch_mimi = loaders.get_mimi(path, None, device="cpu", num_codebooks=8)  # the loader's
    mlx_mimi = MlxMimi.load(path, moshi_mimi_config(), 8)
    assert len(mlx_mimi.model.quantizer.rvq_rest.vq.layers) == 7  # 8 of the file's 32
    torch_codes, mlx_codes, pcm_diff = stream_both(torch_mimi, mlx_mimi, varied_input(4))
    assert np.array_equal(torch_codes, mlx_codes) and pcm_diff <= PCM_TOLERANCE
    assert len(np.unique(torch_codes)) > 8


def test_a_mimi_the_mlx_side_cannot_run_is_refused_with_the_way_out(tiny_folder, tmp_path):
    weights = tiny_folder / "mimi.safetensors"
    with pytest.raises(MimiConfigError, match="does not load into the MLX Mimi"):
        MlxMimi.load(weights, moshi_mimi_config(), 8)  # the tiny file, the full-size config
    gated = tiny_mimi_config()
    gated["transformer"]["gating"] = "silu"
    with pytest.raises(MimiConfigError, match="--mimi torch"):
        MlxMimi.load(weights, gated, 8)
    with pytest.raises(MimiConfigError, match="safetensors"):
        MlxMimi.load(tmp_path / "mimi.pt", tiny_mimi_config(), 8)


def test_auto_is_mlx_on_apple_silicon_and_torch_on_other_cpus(monkeypatch):
    assert mimi_backend("auto") == "torch"  # this Linux machine
    monkeypatch.setattr(frame_codec, "on_apple_silicon", lambda: True)
    assert mimi_backend("auto") == "mlx"
    assert mimi_backend("torch") == "torch"
    with pytest.raises(ValueError, match="choose one of auto, mlx, torch"):
        mimi_backend("rusty")


def test_auto_falls_back_to_torchs_mimi_for_a_file_mlx_cannot_read(tiny_checkpoint, tmp_path,
                                                                    monkeypatch, caplog):
    """On a Mac, "auto" must not stop a conversation that torch's Mimi can hold; an explicit
    --mimi mlx says why it cannot."""
    legacy = tmp_path / "mimi.pt"  # named as moshi's torch.load files are: MLX reads no .pt
    legacy.write_bytes((tiny_checkpoint.folder / "mimi.safetensors").read_bytes())
    tiny_checkpoint.info.mimi_weights = legacy
    monkeypatch.setattr(frame_codec, "on_apple_silicon", lambda: True)
    with caplog.at_level("WARNING", logger=frame_codec.__name__):
        codec = make_frame_codec(tiny_checkpoint, "auto")
    assert isinstance(codec, frame_codec.TorchFrameCodec)
    assert "reads safetensors weights only" in caplog.text
    with pytest.raises(MimiConfigError, match="--mimi torch"):
        make_frame_codec(tiny_checkpoint, "mlx")
