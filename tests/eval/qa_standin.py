"""The stand-in LLM as both the retrieval LLM and the judge of `eval qa` tests: the judge
reads the gold answer and the response out of our own prompt and says CORRECT when the gold
answer's words appear in the response."""

from __future__ import annotations

import re
from collections.abc import Callable

from app.eval.judge import load_prompt
from app.llm.ollama_standin import ScriptedReply

JUDGE_OPENINGS = ("You grade", "You check")


def _line_value(prompt_kind: str, placeholder: str, content: str) -> str:
    """The value our prompt put after the label of `placeholder`'s line."""
    template = load_prompt(prompt_kind)
    label = next(line.split(placeholder)[0] for line in template.splitlines()
                 if placeholder in line)
    for line in content.splitlines():
        if line.startswith(label):
            return line[len(label):]
    raise AssertionError(f"{label!r} not in the judge prompt")


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def judge_verdict(content: str) -> str:
    kind = next(k for k in ("short_answer", "passage", "math", "span_fact")
                if load_prompt(k).splitlines()[0] == content.splitlines()[0])
    gold = _line_value(kind, "{gold}", content).split("| aliases:")[0]
    response = " ".join(_words(_line_value(kind, "{response}", content)))
    wanted = " ".join(_words(gold))
    return "CORRECT" if wanted and f" {wanted} " in f" {response} " else "INCORRECT"


def is_judge_request(body: dict) -> bool:
    first = body["messages"][0]["content"]
    return first.startswith(JUDGE_OPENINGS)


def scripted(answer: Callable[[dict], ScriptedReply]) -> Callable[[dict], ScriptedReply]:
    """A stand-in script: the judge's requests are judged, the others go to `answer`."""

    def script(body: dict) -> ScriptedReply:
        if is_judge_request(body):
            return ScriptedReply(content=judge_verdict(body["messages"][0]["content"]))
        return answer(body)

    return script
