"""Named model shapes, for checkpoint repositories that ship weights without a config.json.

PersonaPlex and the Context Spanning release hold only weights: their own loaders hard-code
the architecture (Moshi 7B, but with a depformer over 16 codebooks: 8 for the model's voice,
8 for the user's). A catalog manifest names the shape here instead. The tiny shapes are the
same architectures at a few hundred thousand parameters, for tests on a CPU.
"""

from __future__ import annotations

from app.checkpoints.tiny_builder import tiny_lm_config, tiny_mimi_config
from app.moshi_internals import moshi_7b_config

TINY_CS_TEXT_VOCAB = 512  # byte pieces 4..259 like Moshi's tokenizer, then words


def personaplex_7b() -> dict:
    """Moshi 7B with dep_q 16: the depformer also predicts the user's 8 codebooks."""
    return moshi_7b_config() | {"dep_q": 16}


def tiny_cs() -> dict:
    """The tiny LM with PersonaPlex's depformer over 16 codebooks and a vocabulary that
    holds the byte pieces (the Context Spanning control ids are byte pieces)."""
    return tiny_lm_config() | {"dep_q": 16, "text_card": TINY_CS_TEXT_VOCAB}


LM_ARCHITECTURES = {"personaplex-7b": personaplex_7b, "tiny-cs": tiny_cs}
MIMI_ARCHITECTURES = {"moshi": lambda: None, "tiny": tiny_mimi_config}  # None: moshi's own


def lm_architecture(name: str) -> dict:
    if name not in LM_ARCHITECTURES:
        raise ValueError(f"unknown LM architecture {name!r} (known: {', '.join(LM_ARCHITECTURES)})")
    return LM_ARCHITECTURES[name]()


def mimi_architecture(name: str) -> dict | None:
    if name not in MIMI_ARCHITECTURES:
        raise ValueError(f"unknown Mimi architecture {name!r}")
    return MIMI_ARCHITECTURES[name]()
