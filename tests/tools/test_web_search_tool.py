"""web_search formatting and failures, with the search call injected (never the real web)."""

from __future__ import annotations

import ddgs
import ollama
import pytest
from ollama._types import WebSearchResult

from app.tools.web_search import SearchError, WebSearchTool, ddgs_search, ollama_search

DDGS_RESULTS = [
    {"title": "Baltic otters recover", "href": "https://example.org/otters",
     "body": "Otter numbers   doubled\nin twenty years."},
    {"title": "Otter-proof nets", "href": "https://example.org/nets",
     "body": "Councils test nets."},
]


def test_results_are_numbered_with_title_url_and_snippet() -> None:
    calls: list[tuple[str, int]] = []

    def search(query: str, max_results: int) -> list[dict]:
        calls.append((query, max_results))
        return DDGS_RESULTS

    result = WebSearchTool(search_fn=search).run({"query": "baltic otters", "max_results": 2})
    assert result.ok, result.error
    assert calls == [("baltic otters", 2)]
    lines = result.content.splitlines()
    assert lines[1:] == [
        "1. Baltic otters recover — https://example.org/otters",
        "Otter numbers doubled in twenty years.",
        "2. Otter-proof nets — https://example.org/nets",
        "Councils test nets.",
    ]
    assert result.source == "web search (ddgs)"


def test_ollama_field_names_are_understood_and_long_snippets_clipped() -> None:
    long_text = "word " * 500
    result = WebSearchTool("ollama", api_key="k", search_fn=lambda q, n: [
        {"title": "Page", "url": "https://example.org/p", "content": long_text}]).run(
        {"query": "x"})
    assert result.ok
    assert "1. Page — https://example.org/p" in result.content
    assert len(result.content) < 600 and result.content.endswith("…")


def test_no_results_is_a_plain_answer_not_an_error() -> None:
    result = WebSearchTool(search_fn=lambda q, n: []).run({"query": "zzqx"})
    assert result.ok and "No web results" in result.content


def test_max_results_is_clamped_and_junk_results_skipped() -> None:
    seen: list[int] = []

    def search(query: str, max_results: int) -> list[dict]:
        seen.append(max_results)
        return ["junk", {"title": "only a title"}, *DDGS_RESULTS]  # type: ignore[list-item]

    result = WebSearchTool(search_fn=search).run({"query": "q", "max_results": 500})
    assert seen == [10]
    assert result.content.count("\n1. ") == 1 and "only a title" not in result.content


@pytest.mark.parametrize(("error", "expected"), [
    (SearchError("the search engine is rate limiting; try again in a minute"), "rate limiting"),
    (TimeoutError("slow"), "timed out"),
    (ConnectionError("no route"), "no network"),
    (RuntimeError("boom\nwith a second line"), "RuntimeError: boom with a second line"),
])
def test_failing_search_gives_a_clean_one_line_error(error: Exception, expected: str) -> None:
    def search(query: str, max_results: int) -> list[dict]:
        raise error

    result = WebSearchTool(search_fn=search).run({"query": "q"})
    assert not result.ok
    assert expected in result.error and "\n" not in result.error


@pytest.mark.parametrize(("arguments", "named"), [
    ({}, "'query'"), ({"query": ""}, "'query'"), ({"query": "  \n "}, "'query'"),
    ({"query": 3}, "'query'"), ({"query": None}, "'query'"), ({"query": ["q"]}, "'query'"),
    ({"query": "q", "max_results": "five"}, "'max_results'"),
    ({"query": "q", "max_results": True}, "'max_results'"),
    ({"query": "q", "max_results": 2.5}, "'max_results'"),
    ({"query": "q", "max_results": None}, "'max_results'"),
])
def test_bad_arguments_are_refused_before_searching(arguments: dict, named: str) -> None:
    """The search is recorded, not made to raise: a raising stub is swallowed by the tool's
    own error handling and would let a missing check pass unnoticed."""
    calls: list[tuple[str, int]] = []

    def search(query: str, max_results: int) -> list[dict]:
        calls.append((query, max_results))
        return DDGS_RESULTS

    result = WebSearchTool(search_fn=search).run(arguments)
    assert calls == []
    assert not result.ok and named in result.error, result.error


@pytest.mark.parametrize(("max_results", "sent"), [(3.0, 3), (0, 1), (-4, 1), (10, 10)])
def test_usable_max_results_are_taken(max_results: object, sent: int) -> None:
    calls: list[tuple[str, int]] = []

    def search(query: str, max_results: int) -> list[dict]:
        calls.append((query, max_results))
        return DDGS_RESULTS

    result = WebSearchTool(search_fn=search).run({"query": " q ", "max_results": max_results})
    assert result.ok, result.error
    assert calls == [("q", sent)]


def test_ollama_provider_without_key_explains_itself() -> None:
    result = WebSearchTool("ollama", api_key=None).run({"query": "q"})
    assert not result.ok and "API key" in result.error


def test_ddgs_provider_maps_library_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    """The real provider function, with the ddgs client replaced (no network)."""
    from ddgs.exceptions import DDGSException, RatelimitException, TimeoutException

    raised: list[Exception] = []

    class FakeDDGS:
        def __init__(self, timeout: int | None = 5) -> None:
            assert timeout == 3

        def text(self, query: str, max_results: int) -> list[dict]:
            raise raised[0]

    monkeypatch.setattr(ddgs, "DDGS", FakeDDGS)
    tool = WebSearchTool(search_fn=ddgs_search(3.0))
    for exc, expected in [(RatelimitException("202"), "rate limiting"),
                          (TimeoutException("timed out"), "timed out after 3 s"),
                          (DDGSException("engine broke"), "engine broke")]:
        raised[:] = [exc]
        result = tool.run({"query": "q"})
        assert not result.ok and expected in result.error
    raised[:] = [DDGSException("No results found.")]
    assert "No web results" in tool.run({"query": "q"}).content


def test_ollama_provider_sends_the_key_and_maps_results(monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    """The real provider function, with the ollama client replaced (no network)."""
    created: list[dict] = []

    class FakeClient:
        def __init__(self, host: str, timeout: float, headers: dict) -> None:
            created.append(headers)

        def web_search(self, query: str, max_results: int) -> ollama.WebSearchResponse:
            return ollama.WebSearchResponse(results=[
                WebSearchResult(title="T", url="https://example.org", content="C")])

        def close(self) -> None:
            pass

    monkeypatch.setattr(ollama, "Client", FakeClient)
    result = WebSearchTool(search_fn=ollama_search("secret-key", 5.0)).run({"query": "q"})
    assert result.ok, result.error
    assert created == [{"Authorization": "Bearer secret-key"}]
    assert "1. T — https://example.org\nC" in result.content


def test_cancelled_before_search_does_not_search() -> None:
    import threading

    cancel = threading.Event()
    cancel.set()
    result = WebSearchTool(search_fn=lambda q, n: DDGS_RESULTS).run({"query": "q"}, cancel)
    assert not result.ok and "cancel" in result.error
