"""A tool call's transcript entry says which server and tool, with which arguments, what
came back (cut as a span is cut, the cut said with its sizes) and how long it took; a tool
waiting for the user's permission is a notice."""

from __future__ import annotations

from app.conversation.transcript.builder import TOOL_RESULT_SHOWN, TranscriptBuilder
from app.orchestrator import events as oe


def called(result: str, **fields) -> oe.ToolCalled:
    defaults = dict(turn_id=1, tool="notes__lookup_word", arguments={"word": "otter"}, ok=True,
                    error=None, source="mcp:notes", chars=len(result), truncated=False,
                    server="notes", server_tool="lookup_word", result=result, elapsed_ms=42.4)
    return oe.ToolCalled(**{**defaults, **fields})


def test_an_mcp_call_shows_server_tool_arguments_result_and_time():
    builder = TranscriptBuilder(clock=lambda: 100.0)
    builder.entries_for(oe.TurnStarted(1, "what does otter mean", "typed"))
    tool = builder.entries_for(called("otter: a river animal."))[0]
    assert tool.kind == "tool"
    assert tool.text == "notes: lookup_word(word='otter')\n→ otter: a river animal."
    assert tool.detail == "ok; 22 characters; in 42 ms"
    assert tool.source == "mcp:notes"


def test_a_long_result_is_shown_cut_as_a_span_is_and_the_cut_is_said():
    builder = TranscriptBuilder(clock=lambda: 100.0)
    result = "The otter swims. " * 100  # 1,700 characters
    tool = builder.entries_for(called(result, elapsed_ms=2345.0))[0]
    shown = tool.text.split("\n→ ", 1)[1]
    assert len(shown) <= TOOL_RESULT_SHOWN and shown.endswith("swims.")  # a sentence's end
    assert "in 2.35 s" in tool.detail
    assert (f"shown: lookup_word's result cut: 1,700 → {len(shown):,} characters (an answer is "
            f"cut to {TOOL_RESULT_SHOWN} characters") in tool.detail


def test_a_builtin_call_and_a_failed_one_read_as_before():
    builder = TranscriptBuilder(clock=lambda: 100.0)
    tool = builder.entries_for(oe.ToolCalled(1, "web_search", {"query": "Lyon"}, False,
                                             "timed out", "ddgs", 0, False))[0]
    assert tool.text == "web_search(query='Lyon')"
    assert tool.detail == "failed: timed out; 0 characters"


def test_a_tool_waiting_for_permission_is_a_notice():
    builder = TranscriptBuilder(clock=lambda: 100.0)
    entry = builder.entries_for(oe.ToolWaiting(1, "add_event", "calendar", "(waiting…)", 3))[0]
    assert entry.kind == "notice" and entry.detail == "info"
    assert entry.text == ("add_event on calendar changes things: it waits for your permission "
                          "(above the transcript; the voice was told to wait).")
