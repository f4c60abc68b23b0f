"""The agent's instructions for Full-Duplex-Bench v3: the LLM is asked as the benchmark's
agent is, with our words (prompts/agent.txt) or the user's own file (`--system-prompt`).

The Context Spanning reference gave its speech model the benchmark agent's system prompt as
its persona; here the LLM that calls the tools gets these instructions, through a backend
that puts them in place of the orchestrator's own system message (the span budget sentence
the orchestrator adds is kept: it says how long an answer the speech model can take). A
checkpoint that asks with <ret> keeps the router's instructions (one tool call per request,
as the paper's runtime routes).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from app.llm.backend import ChatMessage, ChatResult, LLMBackend, ToolSpec
from app.orchestrator.orchestrator import SYSTEM_PROMPT

AGENT_PROMPT_FILE = Path(__file__).with_name("prompts") / "agent.txt"


def agent_prompt(path: Path | None = None) -> str:
    text = (path or AGENT_PROMPT_FILE).read_text(encoding="utf-8").strip()
    if not text:
        raise ValueError(f"the system prompt file {path} is empty")
    return text


class AgentPromptBackend(LLMBackend):
    """`inner`, asked with the agent's instructions as the system message."""

    def __init__(self, inner: LLMBackend, prompt: str) -> None:
        self.inner = inner
        self.prompt = prompt
        self.name = inner.name

    def chat(self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec] = (),
             on_delta: Callable[[str], None] | None = None,
             cancel: threading.Event | None = None) -> ChatResult:
        messages = list(messages)
        # The turn's system message only: the <ret> router's own (one call per request,
        # as the paper's runtime routes) is kept as it is.
        if messages and messages[0].role == "system" and \
                messages[0].content.startswith(SYSTEM_PROMPT):
            budget = messages[0].content.removeprefix(SYSTEM_PROMPT).strip()
            messages[0] = ChatMessage("system", f"{self.prompt} {budget}".strip())
        return self.inner.chat(messages, tools, on_delta, cancel)

    def list_models(self) -> list[str]:
        return self.inner.list_models()

    def close(self) -> None:
        close = getattr(self.inner, "close", None)
        if callable(close):
            close()
