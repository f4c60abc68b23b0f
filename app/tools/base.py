"""The tool interface and the registry the orchestrator calls tools through.

Tool output is untrusted data: it is only ever injected as span content (the injector
strips wrapping markers and special tokens), and it is size-limited here so an enormous
page or file cannot flood the LLM or the speech model's context.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from app.cuts import Cut
from app.llm.backend import ToolSpec

DEFAULT_OUTPUT_LIMIT = 4000  # characters handed back to the LLM per call


@dataclass(frozen=True)
class ToolResult:
    tool: str
    content: str  # untrusted text, already limited to the registry's output limit
    source: str = ""  # where it came from: a URL, a file path, "calculator", ...
    truncated: bool = False
    error: str | None = None  # a clear one-line message when the tool failed
    cuts: tuple[Cut, ...] = ()  # the bounds that cut its output, with the sizes

    @property
    def ok(self) -> bool:
        return self.error is None


class Tool(ABC):
    name: str
    description: str
    parameters: Mapping[str, Any]  # JSON schema of the arguments object

    def spec(self) -> ToolSpec:
        return ToolSpec(self.name, self.description, self.parameters)

    @abstractmethod
    def run(self, arguments: Mapping[str, Any], cancel: threading.Event | None = None
            ) -> ToolResult:
        """Do the work. Raise nothing for expected failures: return a ToolResult with
        `error` set. Every wait inside has a timeout."""


def limit_text(text: str, limit: int) -> tuple[str, bool]:
    if len(text) <= limit:
        return text, False
    return text[: max(0, limit - 1)].rstrip() + "…", True


class ToolRegistry:
    def __init__(self, tools: list[Tool] | None = None,
                 output_limit: int = DEFAULT_OUTPUT_LIMIT) -> None:
        self._tools: dict[str, Tool] = {}
        self.output_limit = output_limit
        for tool in tools or []:
            self.register(tool)

    def register(self, tool: Tool) -> None:
        if tool.name in self._tools:
            raise ValueError(f"tool {tool.name!r} is registered twice")
        self._tools[tool.name] = tool

    def names(self) -> list[str]:
        return sorted(self._tools)

    def close(self) -> None:
        """Release what tools hold open (the local-search index's database)."""
        for tool in self._tools.values():
            close = getattr(tool, "close", None)
            if callable(close):
                close()

    def specs(self) -> list[ToolSpec]:
        return [self._tools[name].spec() for name in self.names()]

    def call(self, name: str, arguments: Mapping[str, Any],
             cancel: threading.Event | None = None) -> ToolResult:
        """Run a tool by name. Unknown tools, bad arguments and crashes become results
        with `error` set: a misbehaving LLM never takes the conversation down."""
        tool = self._tools.get(name)
        if tool is None:
            return ToolResult(name, "", error=f"unknown tool {name!r}")
        if not isinstance(arguments, Mapping):
            return ToolResult(name, "", error="tool arguments must be a JSON object")
        try:
            result = tool.run(arguments, cancel)
        except Exception as exc:  # a tool bug must not end the turn
            return ToolResult(name, "", error=f"{name} failed: {type(exc).__name__}: {exc}")
        content, cut = limit_text(result.content, self.output_limit)
        cuts = result.cuts
        if cut:
            cuts += (Cut(f"{name}'s result", len(result.content), len(content), "characters",
                         f"the {self.output_limit:,}-character limit a tool call hands back"),)
        return ToolResult(result.tool, content, result.source, result.truncated or cut,
                          result.error, cuts)
