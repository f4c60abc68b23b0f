"""The one place an LLM backend is built from a choice of server: the desktop app, headless
runs, the settings dialog's connection test, the evaluation's judges all come here. Which
backend builds it is its row's (app/llm_backends.py): a new backend touches nothing here."""

from __future__ import annotations

from app.llm.backend import BackendChoice, LLMBackend
from app.llm_backends import LLM_BACKEND_NAMES, llm_backend_kind


def make_backend(kind: str, host: str | None = None, model: str | None = None, *,
                 timeout_s: float = 30.0, temperature: float | None = None,
                 api_key: str | None = None, flag: str = "--llm-host") -> LLMBackend:
    """The backend `kind` on the server `host` (empty: its default, e.g. Ollama's, OLLAMA_HOST
    included) with `model` (empty: its default); an OpenAI-compatible server needs `host`,
    its base URL, and takes its key from OPENAI_API_KEY when none is given.

    The connection is given at most 3 s (less with a shorter `timeout_s`): a server that is
    not there answers at once or never. `temperature` None leaves the server's default.
    `flag` names the setting the error message asks for. Raises ValueError for an unknown
    `kind` or an OpenAI-compatible server without a URL."""
    row = llm_backend_kind(kind)
    if row is None:
        raise ValueError(f"unknown LLM backend {kind!r} (choose "
                         f"{' or '.join(LLM_BACKEND_NAMES)})")
    backend = row.build_function()(BackendChoice(
        host=host, model=model, timeout_s=timeout_s, connect_timeout_s=min(3.0, timeout_s),
        temperature=temperature, api_key=api_key, flag=flag))
    if not isinstance(backend, LLMBackend):
        raise TypeError(f"{row.factory} built {type(backend).__name__}, not an LLMBackend")
    return backend
