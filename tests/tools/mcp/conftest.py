"""Fixtures of the MCP tests: the SDK test server on streamable HTTP (mcp_servers.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.ports import free_port
from tests.tools.mcp.mcp_servers import serve_http


@pytest.fixture(scope="module")
def http_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The SDK test server on streamable HTTP; yields its endpoint URL."""
    yield from serve_http(free_port(), tmp_path_factory.mktemp("http-server") / "server.log")
