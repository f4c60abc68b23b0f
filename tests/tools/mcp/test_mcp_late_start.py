"""A server still starting when the desktop's conversation begins is not left at "still
starting" in the transcript: when it becomes ready, the transcript says its tools joined
(and the LLM is offered them); when it fails, it says so and why; after the conversation
ended, it says nothing. Real parts: the SDK test server over stdio, held back by a file the
test creates when it chooses (a slow start without a guessed time), the hub, the registry."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.tools.base import ToolRegistry
from app.tools.calculator import CalculatorTool
from app.tools.mcp.consent import ConsentBroker
from app.tools.mcp.hub import McpHub
from app.tools.mcp.offer import add_mcp_servers
from tests.tools.mcp.mcp_servers import stdio_server
from tests.waiting import wait_until

SETTLE_S = 120.0  # a loaded machine starts a Python server slowly
STILL_STARTING = ("MCP server \"notes\" is still starting: its tools join the assistant as "
                  "soon as it is ready.", "info")


@pytest.fixture()
def hub() -> Iterator[McpHub]:
    # The server's start timeout is far beyond the test's: only the gate decides.
    hub = McpHub(start_timeout_s=SETTLE_S, consent=ConsentBroker(timeout_s=5.0))
    yield hub
    hub.close_all()


def _offer(hub: McpHub, gate: Path, *args: str
           ) -> tuple[ToolRegistry, list[tuple[str, str]]]:
    """The desktop's offer of a server that waits for `gate`: the conversation goes on
    after a short wait, with the server still starting."""
    registry = ToolRegistry([CalculatorTool()])
    notices: list[tuple[str, str]] = []
    add_mcp_servers(registry, [stdio_server("notes", "--start-when", str(gate), *args)],
                    lambda text, severity: notices.append((text, severity)), hub=hub,
                    wait_s=0.1)
    return registry, notices


def _follower_alive() -> bool:
    return any(t.name == "mcp-late-starts" for t in threading.enumerate())


def test_a_server_ready_after_the_start_is_said_to_have_joined_with_its_tools(hub, tmp_path):
    gate = tmp_path / "start"
    registry, notices = _offer(hub, gate)
    try:
        assert notices == [STILL_STARTING]
        assert registry.names() == ["calculator"]
        gate.touch()
        wait_until(lambda: len(notices) == 2, SETTLE_S, message=lambda: f"{notices}")
        tools = len(hub.running()[0].tools)
        assert notices[1] == (f"MCP server \"notes\" is ready: its {tools} tool(s) joined the "
                              "assistant.", "info")
        assert tools > 0 and "lookup_word" in registry.names()  # offered to the LLM now
        wait_until(lambda: not _follower_alive(), 30.0, message="the follower never ended")
    finally:
        registry.close()


def test_a_server_that_fails_after_the_start_is_said_to_have_failed_and_why(hub, tmp_path):
    gate = tmp_path / "start"
    registry, notices = _offer(hub, gate, "--exit-at-start", "4")
    try:
        assert notices == [STILL_STARTING]
        gate.touch()
        wait_until(lambda: len(notices) == 2, SETTLE_S, message=lambda: f"{notices}")
        text, severity = notices[1]
        assert severity == "warning"
        assert text.startswith("MCP server \"notes\" did not start: "), text
        assert "exited with code 4" in text, text
        assert text.endswith("Its tools are off; restart it in Settings → Tools.")
        assert registry.names() == ["calculator"]
    finally:
        registry.close()


def test_after_the_conversation_ends_nothing_more_is_said(hub, tmp_path):
    """The server outlives the conversation (Settings → Tools leases it too): its start
    later is nobody's notice in the ended conversation."""
    gate = tmp_path / "start"
    registry, notices = _offer(hub, gate)
    settings_tab = hub.lease([stdio_server("notes", "--start-when", str(gate))])
    try:
        assert notices == [STILL_STARTING]
        registry.close()  # the conversation ended: its lease is released
        gate.touch()
        assert settings_tab.wait_settled(SETTLE_S)[0].state == "ready"
        wait_until(lambda: not _follower_alive(), 30.0,
                   message="the follower outlived its lease")
        assert notices == [STILL_STARTING]
    finally:
        settings_tab.close()
