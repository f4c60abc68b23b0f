"""Model-triggered retrieval: what happens when the speech model emits its <ret> token.

The Context Spanning checkpoint was trained to emit <ret> right before it answers a
question that needs facts, and to find the answer in a span block at most 2.5 s later. The
runtime then (as the reference does, written from its behaviour):
1. takes the question from the recognised speech, by one of three plans:
   - "cache": the user's last finished utterance, if it ended less than 3 s before <ret>
     and the user is not speaking;
   - "wait": the user is still speaking (or only a partial transcript exists): wait up to
     1 s for the utterance to finish, else fall back to the window;
   - "window": the words of the last 12 s of the user's audio, up to the <ret>;
2. asks the LLM for ONE spoken sentence, or ONE tool call whose result is read as
   "(tool result) ...";
3. injects it with a deadline of <ret> + 2.5 s in conversation time (later: dropped, a
   visible `late`); an empty question or "no information found" injects nothing
   (`no_span`), while a tool's own "(no information found)" is injected.
Times here are conversation time (frames of 80 ms and the recogniser's audio seconds, which
count from the same first frame), so a run replays the same way on a slow or fast machine.
"""

from __future__ import annotations

import re
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from app.asr.events import AsrFinal, AsrPartial, AsrWord
from app.checkpoints.catalog import Retrieval
from app.cuts import Cut
from app.frames import FRAME_S
from app.llm.backend import ChatMessage, LLMBackend
from app.orchestrator.span_writer import speakable_span_cut
from app.tools.base import ToolRegistry, ToolResult, WaitNotice

CONTEXT_CHARS = 480  # each part of the router's user message, as the reference caps it
NO_INFORMATION = "(no information found)"
TOOL_PREFIX = "(tool result) "

ROUTER_PROMPT = (
    "You are the retrieval service of a voice assistant. The assistant's speech model has "
    "just asked for information in the middle of a conversation, and will read your reply "
    "aloud in its own words. Look at the user's latest request and do exactly one thing:\n"
    "- if it needs the current time, date, weather, prices, news, a calculation, the "
    "user's files or anything that changes, call exactly one tool;\n"
    "- otherwise, if you know the answer, reply with one concise factual sentence of 8 to "
    "40 words that can be spoken aloud: no markdown, no lists, no preamble, not in the "
    "first person;\n"
    f"- if neither is possible, reply exactly {NO_INFORMATION}.\n"
    "Fill in places and time zones from the user's profile when the request leaves them out."
)


@dataclass(frozen=True)
class QuestionPlan:
    plan: str  # "cache", "wait" or "window"
    question: str | None  # None: wait for the utterance to finish (plan "wait")


class UtteranceTracker:
    """What the recogniser heard recently, in audio seconds since the conversation began."""

    def __init__(self, window_s: float = 12.0, keep_s: float = 30.0) -> None:
        self._words: deque[AsrWord] = deque()
        self._keep_s = max(keep_s, window_s)
        self.last_final: AsrFinal | None = None
        self._partial: AsrPartial | None = None  # newer than the last final: still speaking

    def on_word(self, word: AsrWord) -> None:
        self._words.append(word)
        while self._words and self._words[0].end_s < word.end_s - self._keep_s:
            self._words.popleft()

    def on_partial(self, partial: AsrPartial) -> None:
        if self.last_final is None or partial.start_s > self.last_final.start_s:
            self._partial = partial

    def on_final(self, final: AsrFinal) -> None:
        if final.text.strip():
            self.last_final = final
        if self._partial is not None and self._partial.start_s <= final.start_s:
            self._partial = None

    @property
    def speaking(self) -> bool:
        return self._partial is not None

    def window(self, end_s: float, seconds: float) -> str:
        words = [w.text for w in self._words if end_s - seconds <= w.end_s <= end_s + 0.5]
        return " ".join(" ".join(words).split())

    def plan(self, ret_s: float, policy: Retrieval) -> QuestionPlan:
        final = self.last_final
        if self.speaking:
            return QuestionPlan("wait", None)
        if final is not None and ret_s - final.end_s < policy.fresh_final_s:
            return QuestionPlan("cache", final.text)
        return QuestionPlan("window", self.window(ret_s, policy.window_s))


def user_profile(name: str | None, city: str | None) -> str:
    """The user's name and city as the retrieval router reads them."""
    parts = [f"name: {name.strip()}" if name and name.strip() else "",
             f"city: {city.strip()}" if city and city.strip() else ""]
    return "; ".join(p for p in parts if p)


def frames_of(seconds: float) -> int:
    return int(seconds / FRAME_S + 1e-9)


def normalise_question(text: str, policy: Retrieval) -> str:
    text = " ".join(text.split())
    return text.lower() if policy.lowercase_question else text


def is_no_information(text: str) -> bool:
    core = re.sub(r"[^a-z ]", " ", text.lower())
    return " ".join(core.split()).startswith("no information found")


@dataclass(frozen=True)
class RetrievalAnswer:
    text: str  # what to inject; "" when there is nothing to inject
    source: str  # "llm" or "llm+<tool>"
    tool: str | None
    no_information: bool  # the LLM said it found nothing (nothing injected)
    cuts: tuple[Cut, ...] = ()  # what the tool's bounds and the span's took out of it
    declared_s: float | None = None  # its server's scripted latency (TurnAnswer.declared_s)


def retrieve(backend: LLMBackend, tools: ToolRegistry, question: str, assistant_said: str,
             profile: str, max_chars: int, cancel: threading.Event,
             on_delta: Callable[[str], None] | None = None,
             on_tool: Callable[[str, dict[str, Any], ToolResult], None] | None = None,
             budget: str = "",
             on_wait: Callable[[str], WaitNotice] | None = None) -> RetrievalAnswer:
    """One router call: a tool call (its result read as "(tool result) ...") or one
    spoken sentence. Raises LLMError when the backend fails. `budget`: the sentence that
    says how long the answer may be (span_budget.py); `on_wait(tool)`: what the tool calls
    if it waits for the user (an MCP tool's permission)."""
    system = ROUTER_PROMPT + (f"\nThe user's profile: {profile}" if profile else "")
    system += f"\n{budget}" if budget else ""
    parts = []
    if assistant_said:
        parts.append(f"The assistant has said: {assistant_said[-CONTEXT_CHARS:]}")
    parts.append(f"The user said: {question[-CONTEXT_CHARS:]}")
    messages = [ChatMessage("system", system), ChatMessage("user", "\n".join(parts))]
    result = backend.chat(messages, tools.specs(), on_delta, cancel)
    declared = result.declared_s
    if result.tool_calls:
        call = result.tool_calls[0]
        outcome = tools.call(call.name, call.arguments, cancel,
                             on_wait=on_wait(call.name) if on_wait is not None else None)
        if declared is not None:  # a scripted LLM's tool still takes its own time
            declared += outcome.replayed_s
        if on_tool is not None:
            on_tool(call.name, dict(call.arguments), outcome)
        if not outcome.ok:
            return RetrievalAnswer("", f"llm+{call.name}", call.name, False,
                                   declared_s=declared)
        body, cut = speakable_span_cut(outcome.content, max(1, max_chars - len(TOOL_PREFIX)),
                                       f"{call.name}'s result")
        if not body:
            return RetrievalAnswer("", f"llm+{call.name}", call.name, False,
                                   declared_s=declared)
        return RetrievalAnswer(TOOL_PREFIX + body, f"llm+{call.name}", call.name, False,
                               outcome.cuts + cut, declared_s=declared)
    text, cut = speakable_span_cut(result.content, max_chars)
    if not text or is_no_information(text):
        return RetrievalAnswer("", "llm", None, True, declared_s=declared)
    return RetrievalAnswer(text, "llm", None, False, cut, declared_s=declared)
