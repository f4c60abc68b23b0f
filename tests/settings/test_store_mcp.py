"""The MCP servers in settings.json: kept as the user made them, an old file upgraded, and
one bad value in one server costing that value only (never the other servers)."""

from __future__ import annotations

import json
from dataclasses import replace

from app.settings.schema import SCHEMA_VERSION, AppSettings, McpServerSettings, McpSettings
from app.settings.store import SettingsStore, to_dict

SERVERS = (
    McpServerSettings(name="files", command="npx",
                      args=("-y", "@modelcontextprotocol/server-filesystem", "/home/me"),
                      env=("API_KEY=abc123", "MODE=fast"), consent="always",
                      disabled_tools=("write_file",), timeout_s=45.0),
    McpServerSettings(name="wiki", url="https://wiki.example.com/mcp",
                      headers=("Authorization: Bearer t0ken",), enabled=False),
)


def test_servers_survive_a_save_and_a_load(tmp_path):
    store = SettingsStore(tmp_path / "settings.json")
    settings = AppSettings(mcp=McpSettings(servers=SERVERS))
    store.save(settings)
    assert store.load() == (settings, None)
    saved = json.loads(store.path.read_text())
    assert saved["mcp"]["servers"][0]["env"] == ["API_KEY=abc123", "MODE=fast"]


def test_a_version_2_file_is_upgraded_with_no_servers(tmp_path):
    store = SettingsStore(tmp_path / "settings.json")
    raw = to_dict(AppSettings())
    raw["version"] = 2
    del raw["mcp"]
    store.path.write_text(json.dumps(raw))
    settings, notice = store.load()
    assert settings == AppSettings() and settings.mcp.servers == ()
    assert notice is not None and f"upgraded from settings version 2 to {SCHEMA_VERSION}" in notice
    assert "missing" not in notice
    assert store.load() == (settings, None)


def test_one_bad_value_costs_only_itself(tmp_path):
    store = SettingsStore(tmp_path / "settings.json")
    raw = to_dict(AppSettings(mcp=McpSettings(servers=SERVERS)))
    raw["mcp"]["servers"][0]["consent"] = "maybe"
    raw["mcp"]["servers"].insert(1, "not a server")
    store.path.write_text(json.dumps(raw))
    settings, notice = store.load()
    assert settings.mcp.servers == (replace(SERVERS[0], consent="ask"), SERVERS[1])
    assert notice is not None
    assert "'mcp.servers[0].consent' had an invalid value \"maybe\"" in notice
    assert "'mcp.servers[1]' is not a group of settings (dropped)" in notice
