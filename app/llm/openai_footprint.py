"""What an OpenAI-compatible server's model weighs here: unknown, so the memory plan leaves
it out and says so (its row's hook in app/llm_backends.py). Light: no client loads."""

from __future__ import annotations

from app.llm_backends import LlmFootprint


def openai_footprint(host: str | None, model: str | None, device_kind: str,
                     timeout_s: float) -> LlmFootprint:
    return LlmFootprint(not_counted="Not counted: the OpenAI-compatible server's model (such "
                                    "servers do not report its size; if it runs here, leave "
                                    "room for it).")
