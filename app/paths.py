"""Where ContextSpan keeps its files: the platformdirs data dir, overridable for tests."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

APP_NAME = "ContextSpan"
REPO_ROOT = Path(__file__).resolve().parent.parent
CATALOG_DIR = REPO_ROOT / "models"
DOCS_DIR = REPO_ROOT / "docs"  # Help reads these (the installers copy them beside the app)
README_PATH = REPO_ROOT / "README.md"


def data_dir() -> Path:
    """The folder that holds built and downloaded checkpoints.

    `CONTEXTSPAN_DATA_DIR` overrides it so tests and CI never write into a user's home.
    """
    override = os.environ.get("CONTEXTSPAN_DATA_DIR")
    if override:
        return Path(override)
    return Path(platformdirs.user_data_dir(APP_NAME, appauthor=False))


def checkpoints_dir() -> Path:
    return data_dir() / "checkpoints"


def compiled_kernels_dir() -> Path:
    """torch.compile's caches (inductor's compiled graphs and kernels) for the engine's step:
    a second start reads them instead of compiling again (app/engine/step_compile.py)."""
    return data_dir() / "compiled"


def converted_weights_dir() -> Path:
    """Weights converted for another framework (the MLX LM), keyed by their source's hash."""
    return data_dir() / "converted"
