"""The LLM backends by name: the one place their names, labels and default addresses are
written, and each one's factory and memory-footprint hook. The settings schema, the
settings dialog's LLM tab, every command line's `--llm` and `--judge`, the factory
(app/llm/factory.py), the memory survey (app/plan/memory_survey.py) and the transcript's
span labels read them here.

Light to import (the settings schema and every parser do): no backend's client loads here,
and a row names its hooks by a dotted path ("app.llm.ollama_backend:from_choice"), imported
when one is called: this base module imports no package above it (tests/test_import_layers.py).
Adding a backend: a row here and its file beside ollama_backend.py (its `from_choice` and its
footprint hook); the factory and the survey are not touched.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

# What the settings file and ConversationConfig.backend hold (typed for the schema's check).
LlmBackendName = Literal["ollama", "openai", "none"]
OLLAMA: LlmBackendName = "ollama"
OPENAI: LlmBackendName = "openai"
NO_LLM: LlmBackendName = "none"  # the speech model talks on its own


@dataclass(frozen=True)
class LlmBackendKind:
    name: LlmBackendName
    label: str  # the settings dialog's choice
    prose: str  # how a span's source names it: "qwen3:4b on {prose}"
    default_host: str  # the address the dialog offers (and Ollama's client falls back to)
    host_placeholder: str  # the dialog's hint for an empty address
    host_required: bool  # no address, no server (Ollama has its own default)
    bare_host_scheme: str | None  # `host:port` means this scheme (Ollama's OLLAMA_HOST)
    # "module:function" building the backend from a BackendChoice (app/llm/backend.py)
    factory: str
    # "module:function" (host, model, device kind, timeout_s) -> LlmFootprint: what its
    # model weighs on this machine's device, for the memory plan
    memory_footprint: str

    def build_function(self) -> Callable[..., Any]:
        """The factory named by `factory` (its module imported now)."""
        return _named(self.factory)

    def footprint_function(self) -> Callable[..., LlmFootprint]:
        """The hook named by `memory_footprint` (its module imported now)."""
        return _named(self.memory_footprint)


@dataclass(frozen=True)
class LlmFootprint:
    """What a backend's model weighs on this machine's device, as its hook says: a load
    (`model`, `bytes`; `measured` by the server, `held_now` already in memory), or, with
    `not_counted`, why it is left out of the plan (the plan says it)."""

    model: str = ""
    bytes: int = 0
    measured: bool = False
    held_now: bool = False
    not_counted: str | None = None


def _named(path: str) -> Callable[..., Any]:
    module, _, name = path.partition(":")
    found = getattr(importlib.import_module(module), name)
    if not callable(found):
        raise TypeError(f"{path} is not a function")
    return found


OLLAMA_BACKEND = LlmBackendKind(
    OLLAMA, "Ollama", "Ollama", "http://127.0.0.1:11434",
    "Empty: Ollama's default (OLLAMA_HOST, else http://127.0.0.1:11434); "
    "host:port means http", host_required=False, bare_host_scheme="http",
    factory="app.llm.ollama_backend:from_choice",
    memory_footprint="app.llm.ollama_footprint:ollama_footprint")
OPENAI_BACKEND = LlmBackendKind(
    OPENAI, "OpenAI-compatible server (llama.cpp, LM Studio, vLLM)",
    "an OpenAI-compatible server",
    "http://127.0.0.1:8080/v1",  # llama.cpp's server; LM Studio is :1234/v1
    "The server's base URL, for example http://127.0.0.1:8080/v1",
    host_required=True, bare_host_scheme=None,
    factory="app.llm.openai_compat_backend:from_choice",
    memory_footprint="app.llm.openai_footprint:openai_footprint")
LLM_BACKENDS: tuple[LlmBackendKind, ...] = (OLLAMA_BACKEND, OPENAI_BACKEND)
NO_LLM_LABEL = "None (the speech model talks on its own)"
# The names `--llm` and `--judge` accept (no backend: leave the flag out).
LLM_BACKEND_NAMES: tuple[str, ...] = tuple(kind.name for kind in LLM_BACKENDS)


def llm_backend_kind(name: str) -> LlmBackendKind | None:
    """The backend called `name`; None for "none" or a name no backend has."""
    return next((kind for kind in LLM_BACKENDS if kind.name == name), None)
