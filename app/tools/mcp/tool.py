"""A server's tool as one of ours: offered to the LLM beside the built-in tools, called
through the server's session, guarded by the user's permission when it changes things."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from app.settings.schema import McpServerSettings
from app.tools.base import Tool, ToolResult
from app.tools.mcp.connection import McpServerConnection, McpToolInfo
from app.tools.mcp.consent import ConsentBroker, needs_consent

MCP_SOURCE = "mcp:"  # a result's source: "mcp:<server>"


def waiting_text(tool: str, server: str) -> str:
    """What the voice is told while the user is asked (it reads it as a span)."""
    return (f"(waiting for the user to allow {tool} on {server}: say that you need their "
            "permission on the screen and wait)")


class McpTool(Tool):
    def __init__(self, name: str, info: McpToolInfo, connection: McpServerConnection,
                 settings: McpServerSettings, consent: ConsentBroker) -> None:
        self.name = name  # unique among the LLM's tools (names.py)
        self.description = info.description or f"{info.name}, a tool of {settings.name}"
        self.parameters: Mapping[str, Any] = info.parameters
        self.info = info
        self.server = settings.name
        self.changes_things = needs_consent(info.read_only, info.destructive)
        self._connection = connection
        self._settings = settings  # this conversation's: its consent and call timeout
        self._consent = consent

    def run(self, arguments: Mapping[str, Any], cancel: threading.Event | None = None
            ) -> ToolResult:
        return self.run_waiting(arguments, cancel, None)

    def run_waiting(self, arguments: Mapping[str, Any], cancel: threading.Event | None,
                    on_wait: Callable[[str], None] | None) -> ToolResult:
        refused = self._permission(arguments, cancel, on_wait)
        if refused is not None:
            return self._result("", error=refused)
        outcome = self._connection.call(self.info.name, arguments, self._settings.timeout_s,
                                        cancel)
        return self._result(outcome.text, outcome.error, outcome.elapsed_ms, outcome.declared_s)

    def _permission(self, arguments: Mapping[str, Any], cancel: threading.Event | None,
                    on_wait: Callable[[str], None] | None) -> str | None:
        """None when the call may go ahead, else why not (for the LLM and the transcript)."""
        policy = self._settings.consent
        if not self.changes_things or policy == "always":
            return None
        if policy == "never":
            return (f"{self.info.name} changes things, and the user does not allow that for "
                    f"{self.server} (Settings → Tools)")
        if self._consent.granted_for_session(self.server):
            return None
        if on_wait is not None and self._consent.can_ask():
            on_wait(waiting_text(self.info.name, self.server))
        answer = self._consent.ask(self.server, self.info.name, self.description, arguments,
                                   cancel)
        return None if answer.allowed else answer.reason

    def _result(self, text: str, error: str | None = None,
                elapsed_ms: float | None = None, declared_s: float | None = None
                ) -> ToolResult:
        return ToolResult(self.name, text, source=f"{MCP_SOURCE}{self.server}", error=error,
                          server=self.server, server_tool=self.info.name,
                          elapsed_ms=elapsed_ms, declared_s=declared_s)
