"""The tool interface and the registry the orchestrator calls tools through.

Tool output is untrusted data: it is only ever injected as span content (the injector
strips wrapping markers and special tokens), and it is size-limited here so an enormous
page or file cannot flood the LLM or the speech model's context.

Besides its own tools a registry may hold tool sources (the user's MCP servers,
app/tools/mcp): their tools are asked for at each offer and each call, so a server that
starts, crashes or is restarted during a conversation joins or leaves the next turn's offer.
"""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

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
    server: str = ""  # an MCP server's tool: the server's name ("" for a built-in tool)
    server_tool: str = ""  # and the server's own name for the tool
    elapsed_ms: float | None = None  # how long the call took (set by the registry)
    # The time its server scripted for the call (a mock API's latency, app/tools/mcp/
    # content.py): a replay with a scripted LLM counts it instead of elapsed_ms.
    declared_s: float | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def replayed_s(self) -> float:
        """The call's time as a replay with a scripted LLM counts it: the server's scripted
        time where it declared one (the same on any machine), else the measured one."""
        if self.declared_s is not None:
            return self.declared_s
        return (self.elapsed_ms or 0.0) / 1000.0


WaitNotice = Callable[[str], None]  # a tool that waits for the user says so, in words


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

    def run_waiting(self, arguments: Mapping[str, Any], cancel: threading.Event | None,
                    on_wait: WaitNotice | None) -> ToolResult:
        """`run`, for a tool that may have to wait for the user (an MCP tool that needs
        permission): it calls `on_wait` first, so that the voice is told to wait."""
        return self.run(arguments, cancel)


class ToolSource(Protocol):
    """Tools that come and go (an MCP server's): asked for at every offer and call."""

    def tools(self, reserved: Collection[str] = ()) -> Sequence[Tool]:
        """The tools available now, named apart from `reserved` (the registry's own)."""
        ...

    def close(self) -> None: ...


def limit_text(text: str, limit: int) -> tuple[str, bool]:
    if len(text) <= limit:
        return text, False
    return text[: max(0, limit - 1)].rstrip() + "…", True


class ToolRegistry:
    def __init__(self, tools: list[Tool] | None = None,
                 output_limit: int = DEFAULT_OUTPUT_LIMIT,
                 sources: Sequence[ToolSource] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        self.output_limit = output_limit
        self._sources: list[ToolSource] = list(sources)
        for tool in tools or []:
            self.register(tool)

    def register(self, tool: Tool) -> None:
        if tool.name in self._tools:
            raise ValueError(f"tool {tool.name!r} is registered twice")
        self._tools[tool.name] = tool

    def add_source(self, source: ToolSource) -> None:
        self._sources.append(source)

    def _source_tools(self) -> list[Tool]:
        reserved = frozenset(self._tools)
        found: list[Tool] = []
        for source in self._sources:
            found += [t for t in source.tools(reserved) if t.name not in reserved]
            reserved |= {t.name for t in found}
        return found

    def names(self) -> list[str]:
        return sorted(self._tools) + [t.name for t in self._source_tools()]

    def close(self) -> None:
        """Release what tools hold open (the local-search index's database, the MCP
        servers' leases)."""
        for tool in self._tools.values():
            close = getattr(tool, "close", None)
            if callable(close):
                close()
        for source in self._sources:
            source.close()

    def specs(self) -> list[ToolSpec]:
        return ([self._tools[name].spec() for name in sorted(self._tools)]
                + [tool.spec() for tool in self._source_tools()])

    def find(self, name: str) -> Tool | None:
        tool = self._tools.get(name)
        if tool is None:
            tool = next((t for t in self._source_tools() if t.name == name), None)
        return tool

    def call(self, name: str, arguments: Mapping[str, Any],
             cancel: threading.Event | None = None,
             on_wait: WaitNotice | None = None) -> ToolResult:
        """Run a tool by name. Unknown tools, bad arguments and crashes become results
        with `error` set: a misbehaving LLM never takes the conversation down. `on_wait`
        hears it when a tool waits for the user (see `Tool.run_waiting`)."""
        started = time.monotonic()
        tool = self.find(name)
        if tool is None:
            return ToolResult(name, "", error=f"unknown tool {name!r}")
        if not isinstance(arguments, Mapping):
            return ToolResult(name, "", error="tool arguments must be a JSON object")
        try:
            result = tool.run_waiting(arguments, cancel, on_wait)
        except Exception as exc:  # a tool bug must not end the turn
            return ToolResult(name, "", error=f"{name} failed: {type(exc).__name__}: {exc}",
                              elapsed_ms=round((time.monotonic() - started) * 1000.0, 3))
        content, cut = limit_text(result.content, self.output_limit)
        cuts = result.cuts
        if cut:
            cuts += (Cut(f"{name}'s result", len(result.content), len(content), "characters",
                         f"the {self.output_limit:,}-character limit a tool call hands back"),)
        elapsed = result.elapsed_ms
        if elapsed is None:
            elapsed = round((time.monotonic() - started) * 1000.0, 3)
        return replace(result, content=content, truncated=result.truncated or cut, cuts=cuts,
                       elapsed_ms=elapsed)
