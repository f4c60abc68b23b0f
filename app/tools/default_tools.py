"""The tool set the assistant starts with, built from one frozen settings object.

A tool that lacks its configuration (local search without folders, Ollama search without a
key) is left out rather than registered broken, so the LLM is never offered a tool that can
only fail.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import platformdirs

from app.paths import APP_NAME
from app.tools.base import DEFAULT_OUTPUT_LIMIT, Tool, ToolRegistry
from app.tools.calculator import CalculatorTool
from app.tools.clock import ClockTool
from app.tools.local_search import LocalFolderSearchTool
from app.tools.web_fetch import WebFetchTool
from app.tools.web_search import WebSearchTool

log = logging.getLogger(__name__)

ALL_TOOLS = ("calculator", "clock", "local_search", "web_fetch", "web_search")


@dataclass(frozen=True)
class ToolSettings:
    enabled: tuple[str, ...] | None = None  # None: every tool that is configured
    search_provider: Literal["ddgs", "ollama"] = "ddgs"
    ollama_api_key: str | None = None  # None: the OLLAMA_API_KEY environment variable
    local_folders: tuple[str, ...] = ()
    local_index_dir: str | None = None  # None: the platformdirs cache dir
    output_limit: int = DEFAULT_OUTPUT_LIMIT
    fetch_timeout_s: float = 10.0
    search_timeout_s: float = 10.0
    fetch_private_hosts: bool = False  # allow web_fetch on localhost / LAN addresses

    def __post_init__(self) -> None:
        if self.search_provider not in ("ddgs", "ollama"):
            raise ValueError(f"unknown search provider {self.search_provider!r}")
        unknown = set(self.enabled or ()) - set(ALL_TOOLS)
        if unknown:
            raise ValueError(f"unknown tool name(s): {', '.join(sorted(unknown))}")
        if self.output_limit < 1:
            raise ValueError("output_limit must be positive")


def default_index_dir() -> Path:
    return Path(platformdirs.user_cache_dir(APP_NAME, appauthor=False)) / "local-search"


def build_tools(settings: ToolSettings) -> ToolRegistry:
    """A registry with every enabled tool that has what it needs to work."""
    wanted = set(ALL_TOOLS if settings.enabled is None else settings.enabled)
    api_key = settings.ollama_api_key or os.environ.get("OLLAMA_API_KEY") or None
    tools: list[Tool] = []
    if "calculator" in wanted:
        tools.append(CalculatorTool())
    if "clock" in wanted:
        tools.append(ClockTool())
    if "web_search" in wanted:
        if settings.search_provider == "ollama" and not api_key:
            log.warning("web_search left out: the Ollama provider needs an API key")
        else:
            tools.append(WebSearchTool(settings.search_provider, api_key,
                                       timeout_s=settings.search_timeout_s))
    if "web_fetch" in wanted:
        tools.append(WebFetchTool(timeout_s=settings.fetch_timeout_s,
                                  allow_private_hosts=settings.fetch_private_hosts))
    if "local_search" in wanted:
        if settings.local_folders:
            index_dir = settings.local_index_dir or default_index_dir()
            tools.append(LocalFolderSearchTool(settings.local_folders, index_dir=index_dir))
        elif settings.enabled is not None:
            # The default settings list every tool and no folder: expected, not a warning.
            log.info("local_search left out: no local folders are chosen")
    return ToolRegistry(tools, output_limit=settings.output_limit)
