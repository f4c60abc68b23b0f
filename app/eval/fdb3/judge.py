"""The LLM judge of Full-Duplex-Bench v3's arguments and responses, through our backends
(app/llm/factory.py: Ollama or an OpenAI-compatible server), with our prompts
(prompts/arguments.txt, prompts/response.txt) written from the benchmark's rules: dynamic
`$RESULT_n` references, formats and aliases, numbers within 5 %, partial tasks wrong.

The judge replies with a JSON object whose "correct" decides. A reply that cannot be read
(or a failed request) is a verdict of None: the scorer then falls back to exact matching
for the arguments and leaves the response out of the average, as the benchmark does.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.llm.backend import ChatMessage, LLMBackend, LLMError
from app.llm.result_references import MISSING, is_reference, resolve

PROMPTS = Path(__file__).with_name("prompts")
_OBJECT = re.compile(r"\{.*\}", re.DOTALL)
REPLY_SHOWN = 300


@dataclass(frozen=True)
class JudgeVerdict:
    value: bool | None  # None: unreadable, or the request failed
    reply: str


def read_correct(reply: str) -> bool | None:
    """The "correct" of the JSON object in `reply` (code fences and prose around it allowed)."""
    found = _OBJECT.search(reply)
    if found is None:
        return None
    parsed: object = None
    for parse in (json.loads, ast.literal_eval):
        try:
            parsed = parse(found.group(0))
            break
        except (ValueError, SyntaxError, RecursionError, MemoryError, TypeError):
            continue
    if not isinstance(parsed, dict):
        return None
    value = parsed.get("correct")
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    return None


def references_line(expected: dict, results: Sequence[Any]) -> str:
    lines = []
    for value in expected.values():
        if is_reference(value):
            known = resolve(value, results)
            lines.append(f"{value} is {json.dumps(known, ensure_ascii=False)}" if known is not
                         MISSING else f"{value}: the earlier call's answer is not known")
    return ("References: " + "; ".join(lines) + "\n") if lines else ""


class ToolJudge:
    def __init__(self, backend: LLMBackend, name: str = "") -> None:
        self.backend = backend
        self.name = name or backend.name
        self._prompts = {kind: (PROMPTS / f"{kind}.txt").read_text(encoding="utf-8")
                         for kind in ("arguments", "response")}

    def _ask(self, prompt: str) -> JudgeVerdict:
        try:
            reply = self.backend.chat([ChatMessage("user", prompt)]).content
        except LLMError as exc:
            return JudgeVerdict(None, f"judge error ({exc.kind}): {exc}"[:REPLY_SHOWN])
        return JudgeVerdict(read_correct(reply), reply.strip()[:REPLY_SHOWN])

    def arguments(self, function: str, expected: dict, actual: dict,
                  results: Sequence[Any]) -> JudgeVerdict:
        # str.replace, not format: arguments may hold braces.
        prompt = (self._prompts["arguments"].replace("{function}", function)
                  .replace("{expected}", json.dumps(expected, ensure_ascii=False))
                  .replace("{actual}", json.dumps(actual, ensure_ascii=False))
                  .replace("{references}", references_line(expected, results)))
        return self._ask(prompt)

    def response(self, intent: str, transcript: str) -> JudgeVerdict:
        if not transcript.strip():
            return JudgeVerdict(False, "the agent said nothing")
        prompt = (self._prompts["response"].replace("{intent}", intent.strip())
                  .replace("{transcript}", transcript.strip()))
        return self._ask(prompt)
