"""The optional relevance judge of user interruption: how well the reply after an
interruption addresses it, 0 to 5, by an LLM through the project's own backends.

The benchmark asks GPT-4-turbo (its code) or GPT-4o (its paper) with its own prompt; ours is
`prompts/interruption_relevance.txt`, so the rating is comparable in spirit, not in value.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from app.eval.judge_settings import JudgeSettings as JudgeSettings  # where it was, for callers
from app.llm.backend import ChatMessage, LLMBackend, LLMError

PROMPT_FILE = Path(__file__).with_name("prompts") / "interruption_relevance.txt"
_RATING = re.compile(r"rating\s*[:=]\s*\**\s*([0-5])\b", re.IGNORECASE)


def parse_rating(reply: str) -> int | None:
    """The last "Rating: N" in the reply (0 to 5), or None when there is none."""
    found = _RATING.findall(reply)
    return int(found[-1]) if found else None


@dataclass(frozen=True)
class Rating:
    value: int | None  # None: the judge's reply had no rating, or the call failed
    reply: str


class RelevanceJudge:
    def __init__(self, backend: LLMBackend, prompt: str | None = None) -> None:
        self.backend = backend
        self.prompt = prompt if prompt is not None else PROMPT_FILE.read_text(encoding="utf-8")

    def rate(self, context: str, interruption: str, response: str) -> Rating:
        text = self.prompt.format(context=context.strip(), interruption=interruption.strip(),
                                  response=response.strip() or "(nothing)")
        try:
            result = self.backend.chat([ChatMessage("user", text)])
        except LLMError as exc:
            return Rating(None, f"judge error ({exc.kind}): {exc}")
        return Rating(parse_rating(result.content), result.content)
