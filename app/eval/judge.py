"""The judge LLM: grades an answer against the gold one with our prompt for the set's kind
(app/eval/prompts/<kind>.txt), through the project's own backends (Ollama or OpenAI-compatible).

A verdict is 1 (correct), 0 (incorrect), -2 (not attempted: the answer commits to nothing),
None (nothing to judge: an empty answer) or -1 (the judge's replies could not be read); the
averages leave out None, -1 and -2 (each is counted), as the reference's scorer leaves out what
it cannot read. With several samples (self-consistency) the verdict is the majority of the
readable replies, a tie counting as incorrect.

Each prompt says how its judge replies, and the reply is read that way (`REPLY_FORMATS`):
our prompts ask for one word; the reference's judges (moshi-rag's) ask for "the score is
[Correct]" after a reasoning, a JSON object whose "judgment" field decides, or "Yes"/"No" on
the first line. A reply is never read by the first label it happens to mention: "not correct
... the score is [Incorrect]" is incorrect. Those prompts are also shown the gold answer as
the reference shows it: the list of every valid answer (`shown_gold`).
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from app.llm.backend import ChatMessage, LLMBackend, LLMError

PROMPTS_DIR = Path(__file__).resolve().parent / "prompts"
UNREADABLE = -1
NOT_ATTEMPTED = -2
_LABEL = re.compile(r"\b(NOT[_ ]ATTEMPTED|NOT CORRECT|INCORRECT|CORRECT)\b")
_LABEL_VALUE = {"CORRECT": 1, "INCORRECT": 0, "NOT CORRECT": 0, "NOT_ATTEMPTED": NOT_ATTEMPTED,
                "NOT ATTEMPTED": NOT_ATTEMPTED}
_BRACKETED = re.compile(r"the score is \[(correct|incorrect)\]", re.IGNORECASE)
_JSON_OBJECT = re.compile(r"\{.*\}", re.DOTALL)


class JudgeError(ValueError):
    pass


def judge_kinds() -> list[str]:
    return sorted(p.stem for p in PROMPTS_DIR.glob("*.txt"))


def load_prompt(kind: str) -> str:
    path = PROMPTS_DIR / f"{kind}.txt"
    if not path.is_file():
        raise JudgeError(f"no judge prompt {kind!r} (there are: {', '.join(judge_kinds())})")
    return path.read_text(encoding="utf-8")


def _one_word(reply: str) -> int:
    """Our prompts: the reply is one label. A reply that says more counts when it names one
    verdict only ("The answer is correct"); naming several is unreadable."""
    text = reply.strip().upper()
    whole = text.strip(" .!*\"'`")
    if whole in _LABEL_VALUE:
        return _LABEL_VALUE[whole]
    first_word = _LABEL.match(text)
    if first_word is not None:  # "INCORRECT — it says Lyon"
        return _LABEL_VALUE[first_word.group(1)]
    said = {_LABEL_VALUE[label] for label in _LABEL.findall(text)}
    return said.pop() if len(said) == 1 else UNREADABLE


def _bracketed(reply: str) -> int:
    """"the score is [Correct]" decides; without one, the reference's fallback: a reply that
    says "incorrect" anywhere is incorrect, else one that says "correct" is correct."""
    found = _BRACKETED.findall(reply)
    if found:
        return 1 if found[0].lower() == "correct" else 0
    low = reply.lower()
    return 0 if "incorrect" in low else 1 if "correct" in low else UNREADABLE


def _json_judgment(reply: str) -> int:
    """The JSON object's "judgment" field decides (its "analysis" may say anything)."""
    body = reply.strip()
    found = _JSON_OBJECT.search(body)
    candidate = found.group(0) if found else body
    parsed: object = None
    for parse in (json.loads, ast.literal_eval):  # judges write single quotes too
        try:
            parsed = parse(candidate)
            break
        except (ValueError, SyntaxError, RecursionError, MemoryError, TypeError):
            continue
    if not isinstance(parsed, dict):
        return UNREADABLE
    judgment = str(parsed.get("judgment", "")).strip().lower()
    return {"correct": 1, "incorrect": 0}.get(judgment, UNREADABLE)


def _first_line_yes_no(reply: str) -> int:
    """The first line, letters only, is "yes" or "no"."""
    lines = reply.strip().splitlines()
    first = re.sub(r"[^a-z]", "", lines[0].lower()) if lines else ""
    return {"yes": 1, "no": 0}.get(first, UNREADABLE)


READERS = {"one_word": _one_word, "bracketed": _bracketed, "json": _json_judgment,
           "yes_no": _first_line_yes_no}
# How each prompt's judge replies (a prompt not named here asks for one word).
REPLY_FORMATS = {"simple_qa": "bracketed", "trivia_json": "json", "math_yes_no": "yes_no"}


def reply_format(kind: str) -> str:
    return REPLY_FORMATS.get(kind, "one_word")


def read_verdict(reply: str, reply_format: str = "one_word") -> int:
    """1, 0, NOT_ATTEMPTED or UNREADABLE, read the way the prompt asked the judge to reply."""
    return READERS[reply_format](reply)


def majority(votes: list[int]) -> int:
    """The majority of the readable votes; a tie is incorrect. Votes that the answer was not
    attempted win only as a majority of their own."""
    readable = [v for v in votes if v != UNREADABLE]
    if not readable:
        return UNREADABLE
    if sum(1 for v in readable if v == NOT_ATTEMPTED) * 2 > len(readable):
        return NOT_ATTEMPTED
    return 1 if sum(1 for v in readable if v == 1) * 2 > len(readable) else 0


@dataclass
class Verdict:
    value: int | None
    votes: list[int] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # failed requests (counted unreadable)


_ALIASES = re.compile(r"\s*\|\s*aliases:\s*")


def answer_variants(gold: str) -> list[str]:
    """Every valid answer in a gold string, as the reference's judges are shown them:
    "x | aliases: a, b" gives x, a and b, and "x; y" both; each once, ignoring case, in the
    order given."""
    answer, *aliases = _ALIASES.split(str(gold), maxsplit=1)
    names = [part.strip() for part in answer.split(";")]
    for listed in aliases:
        names += [part.strip() for part in listed.split(",")]
    variants: list[str] = []
    for name in names:
        if name and name.lower() not in {v.lower() for v in variants}:
            variants.append(name)
    return variants


def shown_gold(kind: str, gold: str) -> str:
    """The gold answer as the prompt `kind` shows it: the reference-style prompts (those in
    `REPLY_FORMATS`) get the list of every valid answer, written as the reference's judges
    see it (`['x', 'a', 'b']`); ours get the gold string itself ("x | aliases: a, b")."""
    return str(answer_variants(gold)) if kind in REPLY_FORMATS else gold.strip()


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
                .replace("{gold}", shown_gold(kind, gold))
                .replace("{response}", response.strip()))
        verdict = Verdict(None)
        for _ in range(self.samples):
            try:
                reply = self.backend.chat([ChatMessage("user", text)])
            except LLMError as exc:
                verdict.errors.append(str(exc))
                verdict.votes.append(UNREADABLE)
                continue
            verdict.votes.append(read_verdict(reply.content, reply_format(kind)))
        verdict.value = majority(verdict.votes)
        return verdict
