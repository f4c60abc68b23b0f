"""A tool's output cut to what a tool call hands back, and an answer the engine refuses
outright: both said, with the sizes and the text (issue 19, items 1 and 8). The real
`ollama` client against the stand-in, a real tool in the registry."""

from __future__ import annotations

from app.conversation.transcript.builder import TranscriptBuilder
from app.llm.ollama_standin import ScriptedReply
from app.orchestrator import events as oe
from tests.orchestrator.test_orchestrator import (
    FactTool,
    collect_until,
    make,
    of,
    standin,  # noqa: F401 - the fixture
)


def test_a_tool_output_over_its_bound_says_its_sizes(standin):  # noqa: F811
    standin.script = [ScriptedReply(tool_calls=[{"name": "lookup", "arguments": {"q": "x"}}]),
                      ScriptedReply(content="Here is what I found.")]
    orch, _sink = make(standin, tool=FactTool("spam " * 100_000))
    try:
        orch.on_typed_text("look it up")
        events = collect_until(orch, lambda ev: of(oe.SpanQueued, ev))
    finally:
        assert orch.stop()
    lookup, = of(oe.ToolCalled, events)
    cut, = lookup.cuts
    assert (cut.before, cut.after, cut.unit) == (500_000, lookup.chars, "characters")
    builder = TranscriptBuilder(clock=lambda: 1.0)
    builder.entries_for(oe.TurnStarted(lookup.turn_id, "look it up", "typed"))
    tool = builder.entries_for(lookup)[0]
    assert tool.kind == "tool"
    assert (f"lookup's result cut: 500,000 → {lookup.chars:,} characters (the 4,000-character "
            "limit a tool call hands back)") in tool.detail


class ClosedEngine:
    """What an engine says once its conversation has ended: it refuses the span outright."""

    def inject(self, text: str, source: str, at_frame: int = 0) -> int:
        raise RuntimeError(f"the conversation has ended: the span from {source} was not "
                           "injected")


def test_an_answer_the_engine_refuses_is_said_with_its_text(standin):  # noqa: F811
    standin.script = [ScriptedReply(content="Canberra is the capital.")]
    orch, _sink = make(standin)
    orch.sink = ClosedEngine()
    try:
        orch.on_typed_text("What is the capital of Australia?")
        events = collect_until(orch, lambda ev: of(oe.AnswerNotInjected, ev)
                               or of(oe.LlmStatus, ev) and ev[-1].state == "error")
    finally:
        assert orch.stop()
    dropped, = of(oe.AnswerNotInjected, events)
    assert dropped.text == "Canberra is the capital." and "has ended" in dropped.reason
    assert not [e for e in of(oe.LlmStatus, events) if "internal error" in e.message]
