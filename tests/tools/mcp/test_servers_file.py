"""Claude Desktop's mcpServers file into our server settings: what other clients write is
read, what cannot work is refused naming the server and the key, never a secret value."""

from __future__ import annotations

import json

import pytest

from app.settings.schema import McpServerSettings
from app.tools.mcp.servers_file import (
    McpConfigError,
    names_problem,
    read_servers_file,
    secret_values,
    servers_for_option,
)

CLAUDE_DESKTOP = {"mcpServers": {
    "filesystem": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem",
                                              "/Users/me/Desktop"]},
    "github": {"command": "docker", "args": ["run", "-i", "--rm", "ghcr.io/github/mcp"],
               "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_secretvalue"}},
    "wiki": {"type": "http", "url": "https://wiki.example.com/mcp",
             "headers": {"Authorization": "Bearer wiki-token"}, "consent": "always",
             "disabledTools": ["delete_page"], "timeout": 90, "someOtherClientsKey": True},
    "old": {"command": "uvx", "args": ["mcp-server-time"], "disabled": True},
}}


def write(tmp_path, data) -> object:
    path = tmp_path / "claude_desktop_config.json"
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return path


def test_a_claude_desktop_file_is_read_as_written(tmp_path):
    servers = read_servers_file(write(tmp_path, CLAUDE_DESKTOP))
    assert [s.name for s in servers] == ["filesystem", "github", "wiki", "old"]
    files, github, wiki, old = servers
    assert files.transport == "stdio" and files.command == "npx"
    assert files.args == ("-y", "@modelcontextprotocol/server-filesystem", "/Users/me/Desktop")
    assert files.consent == "ask" and files.enabled
    assert github.env == ("GITHUB_PERSONAL_ACCESS_TOKEN=ghp_secretvalue",)
    assert wiki.transport == "http" and wiki.headers == ("Authorization: Bearer wiki-token",)
    assert (wiki.consent, wiki.disabled_tools, wiki.timeout_s) == ("always", ("delete_page",),
                                                                   90.0)
    assert not old.enabled
    assert secret_values(github) == ("ghp_secretvalue",)


@pytest.mark.parametrize("entry, words", [
    ({"type": "sse", "url": "https://x.example/sse"}, "SSE transport, which is not supported"),
    ({"command": "a", "url": "https://x.example"}, 'has both "command" and "url"'),
    ({}, 'needs "command" (a stdio server) or "url"'),
    ({"command": "a", "consent": "sometimes"}, '"consent" must be ask, always or never'),
    ({"command": "a", "timeout": 0}, '"timeout" must be from 1 to 600 seconds'),
    ({"command": "a", "args": "--x"}, '"args" must be a list of texts'),
    ({"url": "ftp://x.example"}, "the URL must be an http:// or https:// address"),
    ({"command": "a", "env": {"1BAD": "v"}}, 'environment line "1BAD" must be NAME=value'),
])
def test_what_cannot_work_is_refused_naming_the_server(tmp_path, entry, words):
    with pytest.raises(McpConfigError) as caught:
        read_servers_file(write(tmp_path, {"mcpServers": {"calendar": entry}}))
    assert 'server "calendar" in ' in str(caught.value) and words in str(caught.value)


def test_a_bad_env_value_is_named_by_its_key_never_shown(tmp_path):
    data = {"mcpServers": {"s": {"command": "a", "env": {"TOKEN": 12345678}}}}
    with pytest.raises(McpConfigError) as caught:
        read_servers_file(write(tmp_path, data))
    assert 'env "TOKEN" must be text' in str(caught.value)
    assert "12345678" not in str(caught.value)


def test_unreadable_files_say_where_and_why(tmp_path):
    with pytest.raises(McpConfigError, match="no mcpServers file at"):
        read_servers_file(tmp_path / "nothing.json")
    with pytest.raises(McpConfigError, match=r"not valid JSON \(line 2, column 3: Extra data\)"):
        read_servers_file(write(tmp_path, '{"mcpServers": {\n}}}'))
    with pytest.raises(McpConfigError, match='has no "mcpServers" object'):
        read_servers_file(write(tmp_path, {"servers": {}}))
    with pytest.raises(McpConfigError, match="a few kB"):
        read_servers_file(write(tmp_path, " " * (1024 * 1024 + 1)))
    with pytest.raises(McpConfigError, match="--mcp-config needs --llm"):
        servers_for_option(write(tmp_path, CLAUDE_DESKTOP), has_llm=False)


def test_two_servers_with_one_name_cannot_be_told_apart():
    assert names_problem([McpServerSettings(name="Notes", command="a"),
                          McpServerSettings(name="notes", command="b")]) == (
        'two servers are named "notes": rename one')
    assert names_problem([McpServerSettings(name="a"), McpServerSettings(name="b")]) is None


def test_secrets_include_a_urls_query_and_password():
    server = McpServerSettings(name="s", url="https://user:pa55word@h.example/mcp?key=qwerty123")
    assert set(secret_values(server)) >= {"pa55word", "qwerty123", "key=qwerty123"}
