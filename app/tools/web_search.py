"""Web search for the LLM: keyless through `ddgs`, or Ollama's hosted search with a key.

The search call itself is injectable (`search_fn`), so formatting and error handling are
tested without the network. Results are untrusted text: they are only formatted and
size-limited here, never interpreted.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Mapping
from typing import Any, Literal

from app.tools.base import Tool, ToolResult

Provider = Literal["ddgs", "ollama"]
SearchFn = Callable[[str, int], list[dict]]

MAX_QUERY_CHARS = 400
MAX_RESULTS = 10
DEFAULT_RESULTS = 5
SNIPPET_CHARS = 400
OLLAMA_SEARCH_HOST = "https://ollama.com"


class SearchError(RuntimeError):
    """A search failure with a message fit for the LLM and the status bar."""


def ddgs_search(timeout_s: float) -> SearchFn:
    """The keyless provider: DuckDuckGo and friends through the maintained `ddgs` library."""

    def search(query: str, max_results: int) -> list[dict]:
        from ddgs import DDGS  # imported late: it loads many engines
        from ddgs.exceptions import DDGSException, RatelimitException, TimeoutException

        try:
            return DDGS(timeout=max(1, round(timeout_s))).text(query, max_results=max_results)
        except RatelimitException as exc:
            raise SearchError("the search engine is rate limiting; try again in a minute"
                              ) from exc
        except TimeoutException as exc:
            raise SearchError(f"web search timed out after {timeout_s:g} s") from exc
        except DDGSException as exc:
            if "no results" in str(exc).lower():
                return []
            raise SearchError(f"web search failed: {_one_line(str(exc))}") from exc

    return search


def ollama_search(api_key: str, timeout_s: float) -> SearchFn:
    """Ollama's hosted web search (needs an ollama.com API key)."""

    def search(query: str, max_results: int) -> list[dict]:
        import httpx
        import ollama

        client = ollama.Client(host=OLLAMA_SEARCH_HOST, timeout=timeout_s,
                               headers={"Authorization": f"Bearer {api_key}"})
        try:
            response = client.web_search(query, max_results=max_results)
        except ollama.ResponseError as exc:
            if exc.status_code in (401, 403):
                raise SearchError("Ollama web search refused the API key") from exc
            if exc.status_code == 429:
                raise SearchError("Ollama web search is rate limiting; try again later"
                                  ) from exc
            raise SearchError(f"Ollama web search failed: HTTP {exc.status_code}") from exc
        except httpx.TimeoutException as exc:
            raise SearchError(f"web search timed out after {timeout_s:g} s") from exc
        except (httpx.HTTPError, ConnectionError) as exc:
            raise SearchError("cannot reach ollama.com for web search") from exc
        finally:
            client.close()  # the client holds an httpx connection pool
        return [{"title": r.title, "url": r.url, "content": r.content}
                for r in response.results]

    return search


def _one_line(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _field(item: Mapping[str, Any], *keys: str) -> str:
    """Providers name fields differently (ddgs: href/body, Ollama: url/content)."""
    for key in keys:
        value = item.get(key)
        if isinstance(value, str) and value.strip():
            return _one_line(value)
    return ""


def format_results(query: str, results: list[dict]) -> str:
    lines = [f"Web results for {query!r}:"]
    number = 0
    for item in results:
        if not isinstance(item, Mapping):
            continue
        title = _field(item, "title") or "(untitled)"
        url = _field(item, "href", "url", "link")
        snippet = _clip(_field(item, "body", "content", "snippet", "description"),
                        SNIPPET_CHARS)
        if not url and not snippet:
            continue
        number += 1
        lines.append(f"{number}. {title} — {url}" if url else f"{number}. {title}")
        if snippet:
            lines.append(snippet)
    if number == 0:
        return f"No web results for {query!r}."
    return "\n".join(lines)


class WebSearchTool(Tool):
    """Finds pages on the web; `web_fetch` then reads one of them in full."""

    name = "web_search"
    description = (
        "Search the web. Returns numbered results with a title, URL and short snippet. "
        "Use for current events or facts you are unsure of; read a promising result in full "
        "with web_fetch."
    )
    parameters: Mapping[str, Any] = {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "What to search for"},
            "max_results": {
                "type": "integer", "minimum": 1, "maximum": MAX_RESULTS,
                "description": f"How many results (default {DEFAULT_RESULTS})",
            },
        },
        "required": ["query"],
    }

    def __init__(self, provider: Provider = "ddgs", api_key: str | None = None,
                 timeout_s: float = 10.0, search_fn: SearchFn | None = None) -> None:
        if provider not in ("ddgs", "ollama"):
            raise ValueError(f"unknown web search provider {provider!r}")
        self.provider = provider
        self._api_key = api_key
        self._search: SearchFn | None  # None: no key for the provider that needs one
        if search_fn is not None:
            self._search = search_fn
        elif provider == "ollama":
            self._search = ollama_search(api_key, timeout_s) if api_key else None
        else:
            self._search = ddgs_search(timeout_s)

    def run(self, arguments: Mapping[str, Any], cancel: threading.Event | None = None
            ) -> ToolResult:
        query = arguments.get("query")
        if not isinstance(query, str) or not query.strip():
            return self._error("'query' must be a non-empty string")
        query = _clip(_one_line(query), MAX_QUERY_CHARS)
        count = arguments.get("max_results", DEFAULT_RESULTS)
        if isinstance(count, float) and count.is_integer():
            count = int(count)
        if isinstance(count, bool) or not isinstance(count, int):
            return self._error("'max_results' must be a whole number")
        count = min(max(count, 1), MAX_RESULTS)
        if self._search is None:
            return self._error("Ollama web search needs an API key (OLLAMA_API_KEY); "
                               "add one in the settings or use the keyless provider")
        if cancel is not None and cancel.is_set():
            return self._error("cancelled")
        try:
            results = self._search(query, count)
        except SearchError as exc:
            return self._error(str(exc))
        except TimeoutError:
            return self._error("web search timed out")
        except OSError as exc:
            return self._error(f"web search failed: no network? ({type(exc).__name__})")
        except Exception as exc:  # any provider bug ends as one line, never a crash
            return self._error(f"web search failed: {type(exc).__name__}: "
                               f"{_clip(_one_line(str(exc)), 200)}")
        if cancel is not None and cancel.is_set():
            return self._error("cancelled")
        if not isinstance(results, list):
            return self._error("web search returned something that is not a list of results")
        return ToolResult(self.name, format_results(query, results[:count]),
                          source=f"web search ({self.provider})")

    def _error(self, message: str) -> ToolResult:
        return ToolResult(self.name, "", source=f"web search ({self.provider})", error=message)
