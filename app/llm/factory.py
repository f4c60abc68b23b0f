"""The one place an LLM backend is built from a choice of server: the desktop app, headless
runs, the settings dialog's connection test, the evaluation's judges all come here."""

from __future__ import annotations

import os

from app.llm.backend import LLMBackend
from app.llm_backends import LLM_BACKEND_NAMES, OLLAMA, OPENAI


def make_backend(kind: str, host: str | None = None, model: str | None = None, *,
                 timeout_s: float = 30.0, temperature: float | None = None,
                 api_key: str | None = None, flag: str = "--llm-host") -> LLMBackend:
    """Ollama (`host` and `model` empty: its defaults, OLLAMA_HOST included) or an
    OpenAI-compatible server (`host` its base URL, required; the key from OPENAI_API_KEY
    when none is given, since local servers ignore it but the client insists on one).

    The connection is given at most 3 s (less with a shorter `timeout_s`): a server that is
    not there answers at once or never. `temperature` None leaves the server's default.
    `flag` names the setting the error message asks for. Raises ValueError for an unknown
    `kind` or an OpenAI-compatible server without a URL."""
    connect_timeout_s = min(3.0, timeout_s)
    if kind == OLLAMA:
        from app.llm.ollama_backend import OllamaBackend, OllamaSettings

        defaults = OllamaSettings()
        return OllamaBackend(OllamaSettings(
            host=host or defaults.host, model=model or defaults.model, timeout_s=timeout_s,
            connect_timeout_s=connect_timeout_s,
            options={} if temperature is None else {"temperature": temperature}))
    if kind == OPENAI:
        from app.llm.openai_compat_backend import OpenAICompatBackend, OpenAICompatSettings

        if not host:
            raise ValueError(f"an OpenAI-compatible server needs {flag} (the server's base "
                             "URL, e.g. http://127.0.0.1:8000/v1)")
        return OpenAICompatBackend(OpenAICompatSettings(
            base_url=host, model=model or "", timeout_s=timeout_s,
            connect_timeout_s=connect_timeout_s, temperature=temperature,
            api_key=api_key or os.environ.get("OPENAI_API_KEY") or "not-needed"))
    raise ValueError(f"unknown LLM backend {kind!r} (choose {' or '.join(LLM_BACKEND_NAMES)})")
