"""Claude Desktop's `mcpServers` file, read into our server settings.

    {"mcpServers": {
        "files": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem",
                                              "/home/me/notes"], "env": {"KEY": "value"}},
        "wiki": {"url": "https://wiki.example.com/mcp",
                 "headers": {"Authorization": "Bearer ..."}}}}

The same file configures `run --mcp-config FILE`, `serve --mcp-config FILE` and Settings →
Tools → Import. Also read, as other clients write them: "type" ("stdio", "http",
"streamable-http"; "sse" is refused, that transport is not supported) and "disabled": true.
Ours, which other clients ignore: "consent" ("ask", "always", "never"), "disabledTools" (tool
names not offered to the LLM) and "timeout" (seconds a call may take). Unknown keys are left
alone: every client adds its own.

A problem is a `McpConfigError` that names the server and the key, never a value: `env` and
`headers` hold secrets.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit

from app.settings.schema import McpConsent, McpServerSettings
from app.settings.store import field_range

MAX_FILE_BYTES = 1024 * 1024  # an mcpServers file is a few kB
CONSENTS: tuple[McpConsent, ...] = ("ask", "always", "never")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")  # an HTTP token


class McpConfigError(ValueError):
    pass


def read_servers_file(path: Path) -> tuple[McpServerSettings, ...]:
    """The servers of an `mcpServers` file; McpConfigError says what is wrong with it."""
    path = Path(path)
    try:
        if path.is_dir():
            raise McpConfigError(f"{path} is a folder, not an mcpServers file")
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise McpConfigError(f"{path} is {size:,} bytes: an mcpServers file is a few kB")
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise McpConfigError(f"no mcpServers file at {path}") from None
    except UnicodeDecodeError:
        raise McpConfigError(f"{path} is not UTF-8 text") from None
    except OSError as exc:
        raise McpConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise McpConfigError(f"{path} is not valid JSON (line {exc.lineno}, column "
                             f"{exc.colno}: {exc.msg})") from None
    except RecursionError:
        raise McpConfigError(f"{path} is nested too deeply to read") from None
    return parse_servers(data, str(path))


def parse_servers(data: object, source: str = "the mcpServers file"
                  ) -> tuple[McpServerSettings, ...]:
    """`data` (the file's JSON) as server settings, in the file's order."""
    if not isinstance(data, dict):
        raise McpConfigError(f"{source} must hold a JSON object with \"mcpServers\"")
    servers = data.get("mcpServers")
    if servers is None:
        raise McpConfigError(f"{source} has no \"mcpServers\" object")
    if not isinstance(servers, dict):
        raise McpConfigError(f"\"mcpServers\" in {source} must be an object of servers by name")
    return tuple(_server(str(name), entry, source) for name, entry in servers.items())


def _server(name: str, entry: object, source: str) -> McpServerSettings:
    where = f"server \"{name[:60]}\" in {source}"
    if not name.strip():
        raise McpConfigError(f"a server in {source} has an empty name")
    if not isinstance(entry, dict):
        raise McpConfigError(f"{where} must be an object")
    kind = entry.get("type", "")
    if kind not in ("", "stdio", "http", "streamable-http", "streamableHttp"):
        if kind == "sse":
            raise McpConfigError(f"{where} uses the SSE transport, which is not supported: "
                                 "give its streamable-HTTP endpoint instead")
        raise McpConfigError(f"{where} has an unknown \"type\" (stdio or http)")
    command = _text(entry, "command", where)
    url = _text(entry, "url", where)
    if command and url:
        raise McpConfigError(f"{where} has both \"command\" and \"url\": give one")
    if not command and not url:
        raise McpConfigError(f"{where} needs \"command\" (a stdio server) or \"url\" (a "
                             "streamable-HTTP server)")
    consent = entry.get("consent", "ask")
    if consent not in CONSENTS:
        raise McpConfigError(f"{where}: \"consent\" must be ask, always or never")
    timeout = entry.get("timeout", McpServerSettings.timeout_s)
    low, high = cast(tuple[float, float], field_range(McpServerSettings, "timeout_s"))
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not (
            low <= timeout <= high):
        raise McpConfigError(f"{where}: \"timeout\" must be from {low:g} to {high:g} seconds")
    disabled = entry.get("disabled", False)
    if not isinstance(disabled, bool):
        raise McpConfigError(f"{where}: \"disabled\" must be true or false")
    server = McpServerSettings(
        name=name.strip(), enabled=not disabled, command=command,
        args=_texts(entry, "args", where), url=url,
        env=tuple(env_line(k, v) for k, v in _pairs(entry, "env", where).items()),
        headers=tuple(header_line(k, v) for k, v in _pairs(entry, "headers", where).items()),
        consent=cast(McpConsent, consent), disabled_tools=_texts(entry, "disabledTools", where),
        timeout_s=float(timeout))
    problem = server_problem(server)
    if problem:
        raise McpConfigError(f"{where}: {problem}")
    return server


def _text(entry: Mapping[str, Any], key: str, where: str) -> str:
    value = entry.get(key, "")
    if not isinstance(value, str):
        raise McpConfigError(f"{where}: \"{key}\" must be text")
    return value.strip()


def _texts(entry: Mapping[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = entry.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise McpConfigError(f"{where}: \"{key}\" must be a list of texts")
    return tuple(value)


def _pairs(entry: Mapping[str, Any], key: str, where: str) -> dict[str, str]:
    value = entry.get(key, {})
    if not isinstance(value, dict):
        raise McpConfigError(f"{where}: \"{key}\" must be an object of names and texts")
    for name, item in value.items():
        if not isinstance(item, str):  # the name is said, never the value (a secret)
            raise McpConfigError(f"{where}: {key} \"{str(name)[:60]}\" must be text")
    return {str(k): v for k, v in value.items()}


def env_line(name: str, value: str) -> str:
    return f"{name}={value}"


def header_line(name: str, value: str) -> str:
    return f"{name}: {value}"


def env_pairs(server: McpServerSettings) -> dict[str, str]:
    """The server's environment variables by name (lines without "=" are left out: the
    Settings form refuses them)."""
    return dict(line.split("=", 1) for line in server.env if "=" in line)


def header_pairs(server: McpServerSettings) -> dict[str, str]:
    pairs = (line.split(":", 1) for line in server.headers if ":" in line)
    return {name.strip(): value.strip() for name, value in pairs}


def secret_values(server: McpServerSettings) -> tuple[str, ...]:
    """What must never reach the log or a transcript: every env and header value, and a
    URL's user info and query (tokens travel there too)."""
    values = [*env_pairs(server).values(), *header_pairs(server).values()]
    parts = urlsplit(server.url) if server.url else None
    if parts is not None:
        values += [parts.password or "", parts.query]
        values += [piece.split("=", 1)[-1] for piece in parts.query.split("&")]
    # A word too short to be a secret ("1", "on") would be masked everywhere it appears.
    return tuple(sorted({v for v in values if len(v) >= 4}, key=len, reverse=True))


def server_problem(server: McpServerSettings) -> str | None:
    """What keeps `server` from being started, in words (None: nothing)."""
    if not server.name.strip():
        return "it needs a name"
    if server.command and server.url:
        return "give a command (stdio) or a URL (streamable HTTP), not both"
    if not server.command and not server.url:
        return "give a command (stdio) or a URL (streamable HTTP)"
    if server.url:
        parts = urlsplit(server.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            return "the URL must be an http:// or https:// address with a host"
    for line in server.env:
        name = line.split("=", 1)[0]
        if "=" not in line or not _ENV_NAME.match(name):
            return (f"environment line \"{name[:40]}\" must be NAME=value, the name letters, "
                    "digits and _")
    for line in server.headers:
        name = line.split(":", 1)[0].strip()
        if ":" not in line or not _HEADER_NAME.match(name):
            return f"header line \"{name[:40]}\" must be Name: value"
    return None


def names_problem(servers: Sequence[McpServerSettings]) -> str | None:
    """Two servers with one name cannot be told apart (their tools are named by it)."""
    seen: set[str] = set()
    for server in servers:
        key = server.name.strip().lower()
        if key in seen:
            return f"two servers are named \"{server.name.strip()[:60]}\": rename one"
        seen.add(key)
    return None


MCP_CONFIG_HELP = ("a Claude-Desktop mcpServers JSON file: its servers' tools join the LLM's "
                   "(command/args/env for a stdio server, url/headers for a streamable-HTTP "
                   "one; add \"consent\": \"always\" to a server whose tools change things, "
                   "no one can be asked without a window)")


def servers_for_option(path: Path | None, has_llm: bool) -> tuple[McpServerSettings, ...]:
    """`--mcp-config FILE` of `run` and `serve`, read; () without one."""
    if path is None:
        return ()
    if not has_llm:
        raise McpConfigError("--mcp-config needs --llm: the LLM is what calls the servers' "
                             "tools")
    return read_servers_file(path)
