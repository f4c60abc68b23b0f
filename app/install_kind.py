"""Which install this is: the full one (the speech engine's torch and moshi are here), or the
thin client's (`installer/bootstrap.sh client`, the installers' `--client`): Qt, audio, the
LLM side and the wire, for a speech model on a server. What needs the engine says so, with
the one command that adds it, instead of failing on a missing module."""

from __future__ import annotations

import importlib.util
import sys

from app.paths import REPO_ROOT

# The engine's packages (pyproject.toml's `engine` extra) by the names they are imported as:
# the two whose presence makes the full install, and every one whose absence means it is not.
ENGINE_MODULES = ("torch", "moshi")
ENGINE_EXTRA_MODULES = (*ENGINE_MODULES, "sentencepiece", "safetensors", "silero_vad",
                        "bitsandbytes", "huggingface_hub")


def engine_installed() -> bool:
    """Whether this install can run a speech model (or a recogniser) on this computer."""
    for name in ENGINE_MODULES:
        try:
            if importlib.util.find_spec(name) is None:
                return False
        except (ImportError, ValueError):  # a finder that refuses it counts as missing
            return False
    return True


def full_install_command() -> str:
    """The one command that adds the engine to this install: its own Python, its own
    checkout (editable), the `engine` extra."""
    return f"{sys.executable} -m pip install -e '{REPO_ROOT}[engine]'"


def needs_full_install(what: str) -> str:
    """`what` ("The speech model on this computer") cannot run in the thin client's install,
    in words that say why and what to do."""
    return (f"{what} needs the full install (torch and moshi); this is the thin client's "
            f"install, for a speech model on a server. Add the engine with: "
            f"{full_install_command()}")


def is_engine_module_missing(exc: BaseException) -> bool:
    """An ImportError for one of the engine extra's packages (the thin client's install):
    whichever of them a command happens to import first."""
    name = getattr(exc, "name", None) or ""
    return isinstance(exc, ImportError) and name.split(".")[0] in ENGINE_EXTRA_MODULES
