"""Build random-weight checkpoints in the real on-disk layout.

`tiny`: a small LMModel, a small Mimi and a small SentencePiece tokenizer, deterministic
from a seed, written exactly as a real checkpoint folder is (config.json naming the
weight, Mimi and tokenizer files, safetensors weights), so that tests load it through
the same loader as a real checkpoint.

`moshi-7b-random`: config.json with moshi's own Moshi 7B architecture and a small
tokenizer; the 7B weights are drawn at random on the device when loaded (for timing on a
GPU without weights), never written to disk.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from moshi.models import MimiModel, loaders
from safetensors.torch import save_file

from app.frames import FRAME_RATE, FRAME_SAMPLES, SAMPLE_RATE
from app.moshi_internals import (
    capturing_codebook_inputs,
    mark_codebook_initialised,
    moshi_7b_config,
)

MOSHI_FILE = "model.safetensors"
MIMI_FILE = "mimi.safetensors"
MIMI_CONFIG_FILE = "mimi_config.json"
TOKENIZER_FILE = "tokenizer.model"
CONFIG_FILE = "config.json"
RANDOM_WEIGHTS_MARKER = "random_weights"  # config.json key: weights are drawn at load time

TINY_TEXT_VOCAB = 400
TINY_AUDIO_BINS = 64
TINY_CONTEXT = 375  # 30 s of frames: small enough for tests to run past the window quickly


def tiny_mimi_config() -> dict:
    seanet = {
        "channels": 1,
        "dimension": 32,
        "causal": True,
        "n_filters": 4,
        "n_residual_layers": 1,
        "activation": "ELU",
        "compress": 2,
        "dilation_base": 2,
        "disable_norm_outer_blocks": 0,
        "kernel_size": 7,
        "residual_kernel_size": 3,
        "last_kernel_size": 3,
        "norm": "none",
        "pad_mode": "constant",
        "ratios": [8, 6, 5, 4],  # the real hop length (960 at 24 kHz): frames stay 80 ms
        "true_skip": True,
    }
    return {
        "sample_rate": SAMPLE_RATE,
        "channels": 1,
        "frame_rate": FRAME_RATE,
        "seanet": seanet,
        "quantizer": {
            "dimension": 16,
            "n_q": 8,
            "bins": TINY_AUDIO_BINS,
            "input_dimension": seanet["dimension"],
            "output_dimension": seanet["dimension"],
        },
        "transformer": {
            "d_model": seanet["dimension"],
            "num_heads": 2,
            "num_layers": 1,
            "causal": True,
            "layer_scale": 0.01,
            "context": 250,
            "conv_layout": True,
            "max_period": 10000,
            "gating": "none",
            "norm": "layer_norm",
            "positional_embedding": "rope",
            "dim_feedforward": 64,
            "input_dimension": seanet["dimension"],
            "output_dimensions": [seanet["dimension"]],
        },
    }


def tiny_lm_config() -> dict:
    """A Moshi-architecture LM (17 streams, the real delays) at a few hundred K parameters."""
    return {
        "dim": 64,
        "text_card": TINY_TEXT_VOCAB,
        "existing_text_padding_id": 3,
        "n_q": 16,
        "dep_q": 8,
        "card": TINY_AUDIO_BINS,
        "num_heads": 4,
        "num_layers": 2,
        "hidden_scale": 4.125,
        "causal": True,
        "layer_scale": None,
        "context": TINY_CONTEXT,
        "max_period": 10000,
        "gating": "silu",
        "norm": "rms_norm_f32",
        "positional_embedding": "rope",
        "depformer_dim": 32,
        "depformer_dim_feedforward": 132,
        "depformer_num_heads": 2,
        "depformer_num_layers": 1,
        "depformer_layer_scale": None,
        "depformer_multi_linear": True,
        "depformer_context": 8,
        "depformer_max_period": 10000,
        "depformer_gating": "silu",
        "depformer_pos_emb": "none",
        "depformer_weights_per_step": True,
        "delays": [0, 0, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1, 1],
    }


def train_tokenizer_in_child(out: Path, vocab_size: int, seed: int,
                             byte_fallback: bool = False) -> None:
    # In a child process: SentencePiece training leaves threads that slow torch here.
    cmd = [
        sys.executable, "-m", "app.checkpoints.tokenizer_trainer",
        "--out", str(out), "--vocab-size", str(vocab_size), "--seed", str(seed),
    ] + (["--byte-fallback"] if byte_fallback else [])
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        raise RuntimeError(f"tokenizer training failed: {result.stderr.strip()[-500:]}")


def contiguous_state(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().contiguous().clone() for k, v in module.state_dict().items()}


def _varied_audio(generator: torch.Generator, seconds: float = 4.0) -> torch.Tensor:
    """Tones of many pitches, noise bursts and silence: material for the codebooks."""
    rate, frame = SAMPLE_RATE, FRAME_SAMPLES
    pieces = []
    for _ in range(int(seconds * rate / frame)):
        kind = int(torch.randint(0, 3, (1,), generator=generator))
        t = torch.arange(frame) / rate
        if kind == 0:
            pitch = 80.0 + 900.0 * float(torch.rand(1, generator=generator))
            pieces.append(0.4 * torch.sin(2 * math.pi * pitch * t))
        elif kind == 1:
            pieces.append(0.2 * torch.randn(frame, generator=generator))
        else:
            pieces.append(torch.zeros(frame))
    return torch.cat(pieces)[None, None]  # [1, 1, T]


@torch.no_grad()
def initialise_codebooks(mimi: MimiModel, generator: torch.Generator) -> None:
    """Seed a random Mimi's codebooks from its own latents, like k-means would start.

    moshi builds codebooks as zeros, to be filled by k-means in training: left so, every
    frame quantizes to code 0 and the tiny model never hears the user. Each codebook (in
    residual order) gets vectors drawn from the inputs it actually sees on varied audio,
    so different sounds give different codes.
    """
    from moshi.quantization.core_vq import EuclideanCodebook

    codebooks = [m for m in mimi.modules() if isinstance(m, EuclideanCodebook)]
    audio = _varied_audio(generator)
    for target in codebooks:
        with capturing_codebook_inputs() as seen:  # one encode, to see each codebook's inputs
            mimi.encode(audio)
        latents = seen[id(target)]  # [N, D]
        rows = torch.randint(0, latents.shape[0], (target.codebook_size,), generator=generator)
        jitter = 1e-3 * torch.randn(target.embedding_sum.shape, generator=generator)
        target.embedding_sum.copy_(latents[rows] + jitter)
        target.cluster_usage.fill_(1.0)
        mark_codebook_initialised(target)  # and drop its cached (zero) embedding


def _voice_prompt_wave(seconds: float = 1.6, sample_rate: int = SAMPLE_RATE) -> np.ndarray:
    """A vowel-like harmonic tone with a slow pitch glide: the tiny persona's 'voice'."""
    t = np.arange(int(seconds * sample_rate)) / sample_rate
    pitch = 140.0 + 30.0 * np.sin(2 * math.pi * 0.7 * t)
    phase = 2 * math.pi * np.cumsum(pitch) / sample_rate
    wave = sum(np.sin(h * phase) / h for h in range(1, 6))
    envelope = np.minimum(1.0, np.minimum(t, seconds - t) * 8.0)
    return (0.2 * wave * envelope).astype(np.float32)


def write_random_checkpoint(
    folder: Path,
    *,
    lm_config: dict,
    mimi_config: dict,
    num_codebooks: int,
    text_vocab: int,
    seed: int,
    config_extra: dict,
    add_files: Callable[[Path], None] | None = None,
) -> Path:
    """Write a random-weight checkpoint in the real layout into `folder` (replaced if
    present): tokenizer, LM and Mimi safetensors, Mimi config and config.json naming them.
    It is written to a staging folder first, so a build cut short leaves nothing half-made.
    """
    folder = Path(folder)
    staging = folder.with_name(folder.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)

    train_tokenizer_in_child(staging / TOKENIZER_FILE, text_vocab, seed)
    torch.manual_seed(seed)
    lm = loaders.get_moshi_lm(None, lm_kwargs=lm_config, device="cpu", dtype=torch.float32)
    save_file(contiguous_state(lm), str(staging / MOSHI_FILE))
    torch.manual_seed(seed + 1)
    mimi = loaders.get_mimi(None, mimi_config, device="cpu", num_codebooks=num_codebooks)
    initialise_codebooks(mimi, torch.Generator().manual_seed(seed + 2))
    save_file(contiguous_state(mimi), str(staging / MIMI_FILE))
    (staging / MIMI_CONFIG_FILE).write_text(json.dumps(mimi_config, indent=2) + "\n")

    config = dict(lm_config)
    config.update(
        {
            "moshi_name": MOSHI_FILE,
            "mimi_name": MIMI_FILE,
            "mimi_config_name": MIMI_CONFIG_FILE,
            "tokenizer_name": TOKENIZER_FILE,
            **config_extra,
        }
    )
    (staging / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n")
    if add_files is not None:
        add_files(staging)

    shutil.rmtree(folder, ignore_errors=True)
    staging.rename(folder)
    return folder


def _write_voices(staging: Path) -> None:
    import sphn

    voices = staging / "voices"
    voices.mkdir()
    sphn.write_wav(str(voices / "TINY0.wav"), _voice_prompt_wave(), SAMPLE_RATE)


def build_tiny(folder: Path, seed: int = 1234) -> Path:
    """Write the tiny checkpoint into `folder` (replaced if present). Returns the folder."""
    return write_random_checkpoint(
        folder,
        lm_config=tiny_lm_config(),
        mimi_config=tiny_mimi_config(),
        num_codebooks=8,
        text_vocab=TINY_TEXT_VOCAB,
        seed=seed,
        config_extra={"model_type": "moshi",
                      "model_id": {"sig": f"contextspan-tiny-seed{seed}", "epoch": 0}},
        add_files=_write_voices,
    )


def build_moshi_7b_random(folder: Path, seed: int = 1234) -> Path:
    """Write config.json (moshi's Moshi 7B architecture) and a small tokenizer."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    train_tokenizer_in_child(folder / TOKENIZER_FILE, TINY_TEXT_VOCAB, seed)
    config = moshi_7b_config()  # moshi's own 7B configuration
    config.update(
        {
            "moshi_name": MOSHI_FILE,
            "tokenizer_name": TOKENIZER_FILE,
            "model_type": "moshi",
            RANDOM_WEIGHTS_MARKER: True,
        }
    )
    (folder / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n")
    return folder

