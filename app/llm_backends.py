"""The LLM backends by name: the one place their names, labels and default addresses are
written. The settings schema, the settings dialog's LLM tab, every command line's `--llm`
and `--judge`, the factory and the transcript's span labels read them here.

Light to import (the settings schema and every parser do): no backend's client loads here;
app/llm/factory.py builds them. Adding a backend: a row here, a file beside ollama_backend.py,
a branch in the factory.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

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


OLLAMA_BACKEND = LlmBackendKind(
    OLLAMA, "Ollama", "Ollama", "http://127.0.0.1:11434",
    "Empty: Ollama's default (OLLAMA_HOST, else http://127.0.0.1:11434); "
    "host:port means http", host_required=False, bare_host_scheme="http")
OPENAI_BACKEND = LlmBackendKind(
    OPENAI, "OpenAI-compatible server (llama.cpp, LM Studio, vLLM)",
    "an OpenAI-compatible server",
    "http://127.0.0.1:8080/v1",  # llama.cpp's server; LM Studio is :1234/v1
    "The server's base URL, for example http://127.0.0.1:8080/v1",
    host_required=True, bare_host_scheme=None)
LLM_BACKENDS: tuple[LlmBackendKind, ...] = (OLLAMA_BACKEND, OPENAI_BACKEND)
NO_LLM_LABEL = "None (the speech model talks on its own)"
# The names `--llm` and `--judge` accept (no backend: leave the flag out).
LLM_BACKEND_NAMES: tuple[str, ...] = tuple(kind.name for kind in LLM_BACKENDS)


def llm_backend_kind(name: str) -> LlmBackendKind | None:
    """The backend called `name`; None for "none" or a name no backend has."""
    return next((kind for kind in LLM_BACKENDS if kind.name == name), None)
