"""Settings → Tools, driven as a user drives it (real widgets offscreen, real MCP servers made
with the SDK): it lists each server's tools with their descriptions, a switch keeps one tool
from the assistant, a file of Claude Desktop's is imported, a server is restarted, and what
fails says why. The tab's servers stop when the dialog closes."""

from __future__ import annotations

import json
import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from app.checkpoints.catalog import load_catalog
from app.settings.schema import AppSettings, McpServerSettings, McpSettings
from app.tools.mcp.consent import ConsentBroker
from app.tools.mcp.hub import McpHub
from app.ui.settings.dialog import SettingsDialog
from app.ui.settings.mcp_server_dialog import McpServerDialog
from tests.tools.mcp.mcp_servers import assert_gone, process_alive, read_pid, stdio_server

START_MS = 60_000


@pytest.fixture()
def hub():
    hub = McpHub(consent=ConsentBroker())
    yield hub
    hub.close_all()


def dialog_with(qtbot, hub: McpHub, *servers: McpServerSettings) -> SettingsDialog:
    dialog = SettingsDialog(AppSettings(mcp=McpSettings(servers=servers)),
                            catalog=load_catalog(), stt_models={"tiny-stt": "Tiny STT"},
                            list_voices=lambda manifest, folder: [], mcp_hub=hub)
    qtbot.addWidget(dialog)
    dialog.show()
    dialog.tabs.setCurrentWidget(dialog.tools_tab)
    return dialog


def tool_texts(tab) -> list[str]:
    return [item.text() for item in tab.tool_items()]


def test_a_servers_tools_are_listed_and_one_can_be_switched_off(qtbot, hub, tmp_path):
    pid_file = tmp_path / "pid"
    dialog = dialog_with(qtbot, hub, stdio_server("notes", "--pid-file", str(pid_file)))
    tab = dialog.tools_tab
    qtbot.waitUntil(lambda: len(tab.tool_items()) == 10, timeout=START_MS)
    assert "running, 10 tool(s)" in tab.server_list.item(0).text()
    texts = tool_texts(tab)
    assert any(t.startswith("lookup_word — Look a word up in the test dictionary") for t in texts)
    assert any(t.startswith("add_event (changes things) — Add an event") for t in texts)
    lookup = next(i for i in tab.tool_items() if i.text().startswith("lookup_word"))
    assert lookup.checkState() == Qt.CheckState.Checked
    lookup.setCheckState(Qt.CheckState.Unchecked)
    dialog.consent_combo.setCurrentIndex(dialog.consent_combo.findData("never"))
    chosen = dialog.settings().mcp.servers[0]
    assert chosen.disabled_tools == ("lookup_word",) and chosen.consent == "never"
    pid = read_pid(pid_file)
    dialog.accept()
    assert_gone(pid)  # the tab's lease went with the dialog: nothing else used the server


def test_a_server_that_fails_says_why_and_one_switched_off_stops(qtbot, hub, tmp_path):
    pid_file = tmp_path / "pid"
    dialog = dialog_with(qtbot, hub, stdio_server("broken", "--exit-at-start", "4"),
                         stdio_server("notes", "--pid-file", str(pid_file)))
    tab = dialog.tools_tab
    qtbot.waitUntil(lambda: "failed" in tab.server_list.item(0).text(), timeout=START_MS)
    assert "exited with code 4" in tab.server_list.item(0).text()
    tab.server_list.setCurrentRow(0)
    assert "exited with code 4" in tab.server_status.text()
    qtbot.waitUntil(lambda: "running" in tab.server_list.item(1).text(), timeout=START_MS)
    pid = read_pid(pid_file)
    tab.server_list.item(1).setCheckState(Qt.CheckState.Unchecked)
    assert dialog.settings().mcp.servers[1].enabled is False
    assert tab.server_list.item(1).text().endswith("— off")
    assert_gone(pid)
    dialog.reject()


def test_an_imported_file_adds_its_servers_and_restart_brings_a_new_process(qtbot, hub,
                                                                            tmp_path):
    pid_file = tmp_path / "pid"
    notes = stdio_server("notes", "--pid-file", str(pid_file))
    config = tmp_path / "claude_desktop_config.json"
    config.write_text(json.dumps({"mcpServers": {"notes": {
        "command": notes.command, "args": list(notes.args), "consent": "always"}}}))
    dialog = dialog_with(qtbot, hub)
    tab = dialog.tools_tab
    assert tab.server_status.text() == "No server yet: Add… or Import… one."
    tab.import_servers_file(config)
    qtbot.waitUntil(lambda: tab.server_list.count() == 1, timeout=START_MS)
    assert tab.import_status.text() == f"Imported 1 server(s) from {config}."
    assert dialog.settings().mcp.servers[0].consent == "always"
    qtbot.waitUntil(lambda: "running" in tab.server_list.item(0).text(), timeout=START_MS)
    first = read_pid(pid_file)
    pid_file.unlink()
    tab.restart_button.click()
    qtbot.waitUntil(lambda: pid_file.exists() and bool(pid_file.read_text().strip()),
                    timeout=START_MS)
    qtbot.waitUntil(lambda: "running" in tab.server_list.item(0).text(), timeout=START_MS)
    assert read_pid(pid_file) != first and not process_alive(first)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    tab.import_servers_file(bad)
    qtbot.waitUntil(lambda: tab.import_status.text().startswith("Not imported:"),
                    timeout=START_MS)
    assert "is not valid JSON (line 1" in tab.import_status.text()
    assert tab.server_list.count() == 1
    dialog.reject()


def test_the_server_form_refuses_what_cannot_work(qtbot):
    form = McpServerDialog(McpServerSettings(), [McpServerSettings(name="notes", command="x")])
    qtbot.addWidget(form)
    form.name_edit.setText("Notes")
    form.command_edit.setText("npx")
    assert form.problem_label.text() == 'two servers are named "Notes": rename one'
    form.name_edit.setText("files")
    form.args_edit.setPlainText("-y\n@modelcontextprotocol/server-filesystem\n/home/me/My Notes")
    form.env_edit.setPlainText("API KEY=abc")
    assert form.problem_label.text().startswith('environment line "API KEY" must be')
    form.accept()
    assert form.result() == 0  # still open
    form.env_edit.setPlainText("API_KEY=abc")
    assert form.problem_label.text() == ""
    server = form.server()
    assert server.args == ("-y", "@modelcontextprotocol/server-filesystem", "/home/me/My Notes")
    assert server.env == ("API_KEY=abc",) and server.url == "" and server.transport == "stdio"
    form.transport_combo.setCurrentIndex(form.transport_combo.findData("http"))
    form.url_edit.setText("wiki.example.com/mcp")
    assert "http:// or https://" in form.problem_label.text()
    form.url_edit.setText("https://wiki.example.com/mcp")
    form.headers_edit.setPlainText("Authorization: Bearer t")
    http = form.server()
    assert (http.command, http.env, http.headers) == ("", (), ("Authorization: Bearer t",))


def test_ok_refuses_two_servers_with_one_name(qtbot, hub):
    dialog = dialog_with(qtbot, hub, McpServerSettings(name="a", command="x", enabled=False),
                         McpServerSettings(name="A", command="y", enabled=False))
    dialog.tabs.setCurrentIndex(0)
    dialog.accept()
    assert dialog.result() == 0 and dialog.tabs.currentWidget() is dialog.tools_tab
    dialog.reject()


def test_a_dialog_never_shown_on_the_tools_tab_starts_no_server(qtbot, hub, tmp_path):
    pid_file = tmp_path / "pid"
    dialog = SettingsDialog(AppSettings(mcp=McpSettings(servers=(
        stdio_server("notes", "--pid-file", str(pid_file)),))), catalog=load_catalog(),
        stt_models={"tiny-stt": "Tiny STT"}, list_voices=lambda manifest, folder: [],
        mcp_hub=hub)
    qtbot.addWidget(dialog)
    dialog.show()
    qtbot.wait(300)
    assert hub.running() == [] and not Path(pid_file).exists()
    dialog.reject()
