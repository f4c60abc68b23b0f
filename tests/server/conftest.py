"""The tiny model's host, loaded and warmed up once per module; each test starts its own
server on it (helpers.py), and its conversations take the host engine's row in turn."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from app.checkpoints.catalog import get_manifest
from app.checkpoints.loader import load_checkpoint
from app.engine.speech_engine import EngineOptions
from app.server.engine_host import EngineHost


@pytest.fixture(scope="module")
def tiny_host(tiny_folder: Path) -> Iterator[EngineHost]:
    checkpoint = load_checkpoint(get_manifest("tiny"), tiny_folder, device="cpu")
    host = EngineHost(checkpoint, EngineOptions(seed=1, chunk_limit=16))
    host.wait_warm()
    yield host
    assert host.close(), "the host's engine did not stop"
