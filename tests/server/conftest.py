"""The tiny model's host, loaded once per module; each test starts its own server on it
(helpers.py), and each conversation gets its own engine."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.checkpoints.catalog import get_manifest
from app.checkpoints.loader import load_checkpoint
from app.engine.speech_engine import EngineOptions
from app.server.engine_host import EngineHost


@pytest.fixture(scope="module")
def tiny_host(tiny_folder: Path) -> EngineHost:
    checkpoint = load_checkpoint(get_manifest("tiny"), tiny_folder, device="cpu")
    return EngineHost(checkpoint, EngineOptions(seed=1, chunk_limit=16))
