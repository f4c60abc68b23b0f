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


THREE = (
    McpServerSettings(name="calendar", command="npx", args=("-y", "@acme/calendar-mcp")),
    McpServerSettings(name="notes", command="uvx", args=("notes-mcp", "--dir", "/home/me"),
                      env=("TOKEN=abc",)),
    McpServerSettings(name="wiki", url="https://wiki.example.com/mcp"),
)


def test_a_file_cut_inside_the_servers_keeps_those_read_whole_and_says_what_was_lost(tmp_path):
    """Issue 35, item 18: a settings file cut inside the MCP list lost every server (kept
    only in the backup), and the notice said "'mcp.servers' was missing (defaults used)".
    The servers read whole are kept; the notice says which, and that the rest was lost."""
    store = SettingsStore(tmp_path / "settings.json")
    store.save(AppSettings(mcp=McpSettings(servers=THREE)))
    text = store.path.read_text(encoding="utf-8")
    cut = text[:text.index('"notes-mcp"') + 5]
    store.path.write_text(cut, encoding="utf-8")
    settings, notice = store.load()
    assert settings.mcp.servers == THREE[:1]
    assert notice is not None
    assert ("the list of MCP servers was cut or damaged: 'calendar' was kept, the rest could "
            "not be read: add what is missing again in Settings → Tools") in notice, notice
    assert "'mcp.servers' was missing" not in notice and "mcp.servers" not in notice, notice
    backups = list(tmp_path.glob("settings.json.bak-*"))
    assert len(backups) == 1 and backups[0].read_text(encoding="utf-8") == cut
    assert store.load() == (settings, None)  # the file now holds what was kept

