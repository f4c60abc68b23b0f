"""How much memory the user's Ollama model takes, in Ollama's own words.

A loaded model is in `/api/ps` with `size` (all it holds) and `size_vram` (the part on the
GPU), which Ollama measured when it loaded it. A model not loaded yet is estimated: its file
(`/api/tags` `size`) plus the KV cache at the context Ollama would give it, from the layers
and heads `/api/show` reports in `model_info`. Ollama also allocates a compute graph, which
the estimate leaves out (the plan says "about").
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx
import ollama

from app.llm_backends import LlmFootprint

# Ollama's num_ctx when neither the request nor OLLAMA_CONTEXT_LENGTH sets one.
OLLAMA_DEFAULT_CONTEXT = 4096
KV_BYTES_PER_VALUE = 2  # Ollama's default KV cache type is f16


class OllamaSizeUnknown(Exception):
    """Ollama could not say how big the model is (unreachable, or no such model)."""


@dataclass(frozen=True)
class OllamaModelMemory:
    model: str
    bytes: int  # everything the model takes (weights, KV cache, and when loaded its graph)
    vram_bytes: int  # the part on the GPU (Ollama offloads what does not fit to RAM)
    loaded: bool  # True: measured by Ollama (/api/ps); False: estimated
    local: bool  # the server runs on this machine, so the model shares its memory


def is_local_host(host: str) -> bool:
    """Whether an Ollama host address names this machine."""
    address = host if "://" in host else f"http://{host}"
    name = (urlsplit(address).hostname or "").lower()
    if name in ("", "localhost", "0.0.0.0", "::1", "::") or name.startswith("127."):
        return True
    return name in {socket.gethostname().lower(), socket.getfqdn().lower()}


def _full(name: str) -> str:
    return name if ":" in name else f"{name}:latest"


def kv_cache_bytes(model_info: dict[str, Any], num_ctx: int) -> int:
    """The KV cache of `num_ctx` positions, from the GGUF metadata Ollama's /api/show
    returns (`<arch>.block_count`, `<arch>.attention.head_count_kv`, ...); 0 if it lacks them."""
    arch = model_info.get("general.architecture", "")

    def key(name: str) -> int | None:
        value = model_info.get(f"{arch}.{name}")
        return int(value) if isinstance(value, (int, float)) else None

    layers, heads = key("block_count"), key("attention.head_count")
    kv_heads = key("attention.head_count_kv") or heads
    width = key("embedding_length")
    head_dim = width // heads if width and heads else None
    key_length = key("attention.key_length") or head_dim
    value_length = key("attention.value_length") or head_dim
    if not (layers and kv_heads and key_length and value_length):
        return 0
    context = min(num_ctx, key("context_length") or num_ctx)
    return layers * kv_heads * (key_length + value_length) * context * KV_BYTES_PER_VALUE


def ollama_model_memory(host: str, model: str, *, num_ctx: int = OLLAMA_DEFAULT_CONTEXT,
                        timeout_s: float = 3.0) -> OllamaModelMemory:
    """Ask the Ollama at `host` what `model` takes. Raises OllamaSizeUnknown."""
    client = ollama.Client(host=host, timeout=httpx.Timeout(timeout_s))
    try:
        for loaded in client.ps().models:
            if _full(loaded.model or loaded.name or "") == _full(model):
                size = int(loaded.size or 0)
                vram = int(loaded.size_vram if loaded.size_vram is not None else size)
                return OllamaModelMemory(model, size, vram, True, is_local_host(host))
        files = {_full(m.model or ""): int(m.size or 0) for m in client.list().models}
        if _full(model) not in files:
            raise OllamaSizeUnknown(f"{model} is not installed in Ollama at {host}")
        info = dict(client.show(model).modelinfo or {})
    except (ConnectionError, httpx.TransportError) as exc:
        raise OllamaSizeUnknown(f"Ollama is not reachable at {host}") from exc
    except ollama.ResponseError as exc:
        raise OllamaSizeUnknown(f"Ollama at {host} answered: {exc.error}") from exc
    finally:
        client.close()
    estimate = files[_full(model)] + kv_cache_bytes(info, num_ctx)
    return OllamaModelMemory(model, estimate, estimate, False, is_local_host(host))


def ollama_footprint(host: str | None, model: str | None, device_kind: str,
                     timeout_s: float) -> LlmFootprint:
    """Ollama's memory-footprint hook (its row in app/llm_backends.py): the model as it
    weighs on this machine's `device_kind` device, or why it is not counted (Ollama cannot
    say, or it runs on another machine). Empty host or model: Ollama's defaults."""
    from app.llm.ollama_backend import OllamaSettings

    defaults = OllamaSettings()
    host, model = host or defaults.host, model or defaults.model
    try:
        memory = ollama_model_memory(host, model, timeout_s=timeout_s)
    except OllamaSizeUnknown as exc:
        return LlmFootprint(not_counted=f"{model} is not counted: {exc}.")
    if not memory.local:
        return LlmFootprint(not_counted=f"{model} runs in Ollama at {host}, another machine: "
                                        "not counted here.")
    # On a GPU only what Ollama put there counts; unified memory and RAM hold all of it.
    size = memory.vram_bytes if device_kind == "cuda" else memory.bytes
    return LlmFootprint(model, size, measured=memory.loaded, held_now=memory.loaded)
