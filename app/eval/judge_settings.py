"""Which LLM judges an evaluation's answers: `eval qa`, `eval fdb` and `eval fdb3 score`
offer the same four flags, declared once here (app/command_options.py); each command's
notes say what its judge rates."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from app.command_options import cli_option
from app.llm_backends import LLM_BACKEND_NAMES

if TYPE_CHECKING:
    from app.llm.backend import LLMBackend


@dataclass(frozen=True)
class JudgeSettings:
    backend: str = field(metadata=cli_option(  # app/llm_backends.py
        "--judge", choices=LLM_BACKEND_NAMES, default=None,  # absent: nothing is judged
        help="the judge LLM's backend"))
    host: str | None = field(default=None, metadata=cli_option(
        "--judge-host",
        help="Ollama host or an OpenAI-compatible base URL (key: $OPENAI_API_KEY)"))
    model: str | None = field(default=None, metadata=cli_option("--judge-model"))
    timeout_s: float = field(default=60.0, metadata=cli_option(
        "--judge-timeout", metavar="SECONDS"))

    def client(self, temperature: float | None) -> LLMBackend:
        """The judge's LLM (app/llm/factory.py); a missing URL is named by its flag."""
        from app.llm.factory import make_backend

        return make_backend(self.backend, self.host, self.model, timeout_s=self.timeout_s,
                            temperature=temperature, flag="--judge-host")
