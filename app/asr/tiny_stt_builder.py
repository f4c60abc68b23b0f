"""Build a tiny random-weight STT checkpoint in the real Kyutai STT on-disk layout.

Kyutai's STT (kyutai/stt-1b-en_fr) is an LMModel with no depformer (dep_q = 0): one text
stream predicted from 32 Mimi codebooks of the user's audio, every stream at delay 0; the
text is late on the audio by `stt_config.audio_delay_seconds` because it was trained that
way, not through the delays. Its Hugging Face config.json carries `model_type: "stt"`,
`stt_config` and the Mimi / tokenizer file names. The tiny checkpoint keeps all of that and
adds the four end-of-speech heads (6 classes each) that the `-candle` release carries, at a
few hundred K parameters, so tests load it through the same loader as the real one.
"""

from __future__ import annotations

from pathlib import Path

from app.checkpoints.tiny_builder import (
    tiny_mimi_config,
    write_random_checkpoint,
)

TINY_STT_TEXT_VOCAB = 400
TINY_STT_AUDIO_BINS = 64
TINY_STT_CODEBOOKS = 32  # as the real STT: all 32 Mimi codebooks go in
TINY_STT_CONTEXT = 375  # 30 s of frames (the real 1B model has 750)
TINY_STT_DELAY_S = 0.5  # kyutai/stt-1b-en_fr's audio delay
EXTRA_HEADS = 4  # end-of-speech heads, as in kyutai/stt-1b-en_fr-candle
EXTRA_HEADS_DIM = 6


def tiny_stt_mimi_config() -> dict:
    """The tiny Mimi with 32 codebooks, because the STT reads all of them."""
    config = tiny_mimi_config()
    config["quantizer"] = dict(config["quantizer"], n_q=TINY_STT_CODEBOOKS)
    return config


def tiny_stt_lm_config() -> dict:
    """The STT LM's config.json keys (architecture + STT extras) at tiny dimensions."""
    return {
        "dim": 64,
        "text_card": TINY_STT_TEXT_VOCAB,
        "existing_text_padding_id": 3,
        "n_q": TINY_STT_CODEBOOKS,
        "dep_q": 0,  # no depformer: the STT generates no audio
        "card": TINY_STT_AUDIO_BINS,
        "num_heads": 4,
        "num_layers": 2,
        "hidden_scale": 4.125,
        "causal": True,
        "layer_scale": None,
        "context": TINY_STT_CONTEXT,
        "max_period": 100000,
        "gating": "silu",
        "norm": "rms_norm_f32",
        "positional_embedding": "rope",
        "extra_heads_num_heads": EXTRA_HEADS,
        "extra_heads_dim": EXTRA_HEADS_DIM,
        "delays": [0] * (TINY_STT_CODEBOOKS + 1),
    }


def build_tiny_stt(folder: Path, seed: int = 1234) -> Path:
    """Write the tiny STT checkpoint into `folder` (replaced if present). Returns the folder.

    Runs SentencePiece training in a child process, so call it from a process that may
    spawn one (not a test process that then runs torch: see app.checkpoints.tiny_builder).
    """
    return write_random_checkpoint(
        folder,
        lm_config=tiny_stt_lm_config(),
        mimi_config=tiny_stt_mimi_config(),
        num_codebooks=TINY_STT_CODEBOOKS,
        text_vocab=TINY_STT_TEXT_VOCAB,
        seed=seed,
        config_extra={
            "model_type": "stt",
            "lm_gen_config": {"temp": 0.0, "temp_text": 0.0, "top_k": 250, "top_k_text": 50},
            "stt_config": {
                "audio_delay_seconds": TINY_STT_DELAY_S,
                "audio_silence_prefix_seconds": 0.0,
            },
            "model_id": {"sig": f"contextspan-tiny-stt-seed{seed}", "epoch": 0},
        },
    )


STT_BUILDERS = {"tiny-stt": build_tiny_stt}
