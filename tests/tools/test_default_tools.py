"""The default tool set and the registry contract every tool keeps."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.llm.backend import ToolSpec
from app.tools.base import ToolRegistry
from app.tools.calculator import CalculatorTool
from app.tools.clock import ClockTool
from app.tools.default_tools import ALL_TOOLS, ToolSettings, build_tools
from app.tools.web_search import WebSearchTool


@pytest.fixture(autouse=True)
def no_env_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OLLAMA_API_KEY", raising=False)


def test_defaults_leave_out_tools_without_configuration() -> None:
    registry = build_tools(ToolSettings())
    assert registry.names() == ["calculator", "clock", "web_fetch", "web_search"]


def test_local_folders_add_local_search(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("The heron nests by the pond.\n")
    registry = build_tools(ToolSettings(local_folders=(str(tmp_path / "docs"),),
                                        local_index_dir=str(tmp_path / "index")))
    assert registry.names() == list(ALL_TOOLS)
    result = registry.call("local_search", {"query": "heron"})
    assert result.ok and "a.md" in result.content


def test_ollama_search_needs_a_key(monkeypatch: pytest.MonkeyPatch) -> None:
    assert "web_search" not in build_tools(ToolSettings(search_provider="ollama")).names()
    with_key = build_tools(ToolSettings(search_provider="ollama", ollama_api_key="k"))
    assert "web_search" in with_key.names()
    monkeypatch.setenv("OLLAMA_API_KEY", "from-env")
    assert "web_search" in build_tools(ToolSettings(search_provider="ollama")).names()


def test_enabled_subset_and_output_limit() -> None:
    registry = build_tools(ToolSettings(enabled=("clock", "calculator"), output_limit=123))
    assert registry.names() == ["calculator", "clock"]
    assert registry.output_limit == 123


@pytest.mark.parametrize("bad", [
    {"enabled": ("clock", "shell")}, {"search_provider": "bing"}, {"output_limit": 0},
])
def test_settings_are_validated(bad: dict) -> None:
    with pytest.raises(ValueError):
        ToolSettings(**bad)


def test_every_spec_is_a_json_schema_object(tmp_path: Path) -> None:
    registry = build_tools(ToolSettings(local_folders=(str(tmp_path),),
                                        local_index_dir=str(tmp_path / "index")))
    for spec in registry.specs():
        assert isinstance(spec, ToolSpec)
        assert spec.description and spec.parameters["type"] == "object"
        properties = spec.parameters["properties"]
        assert set(spec.parameters["required"]) <= set(properties)
        for schema in properties.values():
            assert schema["type"] in ("string", "integer") and schema["description"]


def test_unknown_tool_and_non_object_arguments_are_errors() -> None:
    registry = build_tools(ToolSettings(enabled=("calculator",)))
    unknown = registry.call("shell", {"cmd": "rm -rf /"})
    assert not unknown.ok and "unknown tool" in unknown.error
    not_object = registry.call("calculator", ["1+1"])  # type: ignore[arg-type]
    assert not not_object.ok and "JSON object" in not_object.error


@pytest.mark.parametrize("arguments", [
    {}, {"query": None}, {"query": 1, "url": 2, "expression": 3, "timezone": 4},
    {"query": ["a"], "url": {"a": 1}, "expression": [], "timezone": []},
])
def test_bad_arguments_give_errors_from_every_tool(tmp_path: Path, arguments: dict) -> None:
    registry = build_tools(ToolSettings(local_folders=(str(tmp_path),),
                                        local_index_dir=str(tmp_path / "index")))
    for name in registry.names():
        result = registry.call(name, arguments)
        if name == "clock" and "timezone" not in arguments:
            assert result.ok  # the clock has no required argument; extras are ignored
            continue
        assert not result.ok, name
        assert result.error and "failed:" not in result.error, result.error  # no crash


def test_output_is_limited_and_marked_truncated() -> None:
    long_results = [{"title": f"Result {i}", "href": f"https://example.org/{i}",
                     "body": "snippet " * 40} for i in range(10)]
    registry = ToolRegistry([WebSearchTool(search_fn=lambda q, n: long_results[:n]),
                             CalculatorTool(), ClockTool()], output_limit=200)
    result = registry.call("web_search", {"query": "q", "max_results": 10})
    assert result.ok and result.truncated
    assert len(result.content) <= 200 and result.content.endswith("…")
    short = registry.call("calculator", {"expression": "1 + 1"})
    assert short.ok and not short.truncated and short.content == "1 + 1 = 2"
