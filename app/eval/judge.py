"""The judge LLM: grades an answer against the gold one with our prompt for the set's kind
(app/eval/prompts/<kind>.txt), through the project's own backends (Ollama or OpenAI-compatible).

A verdict is 1 (correct), 0 (incorrect or not attempted), None (nothing to judge: an empty
answer) or -1 (the judge's replies could not be read); the averages leave out None and -1,
as the reference's scorer does. With several samples (self-consistency) the verdict is the
majority of the readable replies, a tie counting as incorrect.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from app.llm.backend import ChatMessage, LLMBackend, LLMError

PROMPTS_DIR = Path(__file__).resolve().parent / "prompts"
UNREADABLE = -1
_LABEL = re.compile(r"\b(NOT[_ ]ATTEMPTED|INCORRECT|CORRECT)\b")


class JudgeError(ValueError):
    pass


def judge_kinds() -> list[str]:
    return sorted(p.stem for p in PROMPTS_DIR.glob("*.txt"))


def load_prompt(kind: str) -> str:
    path = PROMPTS_DIR / f"{kind}.txt"
    if not path.is_file():
        raise JudgeError(f"no judge prompt {kind!r} (there are: {', '.join(judge_kinds())})")
    return path.read_text(encoding="utf-8")


def read_verdict(reply: str) -> int:
    """1, 0, or UNREADABLE: the first label in the reply decides."""
    found = _LABEL.search(reply.upper())
    if found is None:
        return UNREADABLE
    return 1 if found.group(1) == "CORRECT" else 0


def majority(votes: list[int]) -> int:
    readable = [v for v in votes if v != UNREADABLE]
    if not readable:
        return UNREADABLE
    return 1 if sum(readable) * 2 > len(readable) else 0


@dataclass
class Verdict:
    value: int | None
    votes: list[int] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # failed requests (counted unreadable)


class Judge:
    def __init__(self, backend: LLMBackend, samples: int = 1) -> None:
        if samples < 1:
            raise JudgeError("--judge-samples must be at least 1")
        self.backend = backend
        self.samples = samples
        self._prompts: dict[str, str] = {}

    @property
    def name(self) -> str:
        return self.backend.name

    def grade(self, kind: str, question: str, gold: str, response: str) -> Verdict:
        if not response.strip():
            return Verdict(None)
        prompt = self._prompts.get(kind)
        if prompt is None:
            prompt = self._prompts[kind] = load_prompt(kind)
        # str.replace, not format: questions and answers may hold braces.
        text = (prompt.replace("{question}", question.strip())
                .replace("{gold}", gold.strip()).replace("{response}", response.strip()))
        verdict = Verdict(None)
        for _ in range(self.samples):
            try:
                reply = self.backend.chat([ChatMessage("user", text)])
            except LLMError as exc:
                verdict.errors.append(str(exc))
                verdict.votes.append(UNREADABLE)
                continue
            verdict.votes.append(read_verdict(reply.content))
        verdict.value = majority(verdict.votes)
        return verdict
