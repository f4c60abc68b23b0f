"""The checkpoints the project builds itself (`python main.py build NAME`), by builder name."""

from __future__ import annotations

from app.checkpoints.tiny_builder import build_moshi_7b_random, build_tiny
from app.checkpoints.tiny_cs_builder import build_tiny_cs

BUILDERS = {"tiny": build_tiny, "moshi-7b-random": build_moshi_7b_random,
            "tiny-cs": build_tiny_cs}
