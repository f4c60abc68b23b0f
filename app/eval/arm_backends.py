"""What answers a trigger in each arm of `eval qa`, as LLM backends so that every arm runs
the same pipeline (ASR, question, orchestrator, injection) and differs only in the span:

- inject: the configured LLM (with its tools);
- gold: the item's gold passage, at once (the reference injects HaluEval's passage so);
- no-inject: nothing ("" reads as "no information": the trigger is recorded, no span lands).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from app.llm.backend import ChatMessage, ChatResult, LLMBackend, LLMError, ToolSpec


class _FixedAnswerBackend(LLMBackend):
    def __init__(self, answer: str) -> None:
        self.answer = answer

    def chat(self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec] = (),
             on_delta: Callable[[str], None] | None = None,
             cancel: threading.Event | None = None) -> ChatResult:
        if cancel is not None and cancel.is_set():
            raise LLMError("cancelled", "cancelled")
        if on_delta is not None and self.answer:
            on_delta(self.answer)
        return ChatResult(self.answer, (), 0.0 if self.answer else None, 0.0)

    def list_models(self) -> list[str]:
        return [self.name]


class GoldPassageBackend(_FixedAnswerBackend):
    name = "gold passage"


class WithheldBackend(_FixedAnswerBackend):
    name = "no injection"

    def __init__(self) -> None:
        super().__init__("")
