"""Settings → Tools: the user's MCP servers, each with its state and its tools.

Servers are added, edited, removed, switched on and off, imported from a Claude-Desktop
`mcpServers` file, and restarted; each server's tools are listed with their descriptions,
switched off one by one, and the server says whether its tools that change things may run
(ask, always, never).

To list a server's tools it must run: the tab leases the enabled servers from the process's
hub when it is first shown (the conversation's own servers, if one runs, are the same
processes), follows their states on a timer while it is shown, and lets its lease go when
the dialog closes. Nothing here waits: leasing starts threads, a restart and a release run
on threads of their own, the file is read by a background job.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, cast

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QShowEvent
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.display_text import visible_controls
from app.settings.schema import McpServerSettings, McpSettings
from app.text_bounds import bounded
from app.tools.mcp.consent import needs_consent
from app.tools.mcp.servers_file import (
    McpConfigError,
    names_problem,
    read_servers_file,
    server_problem,
)
from app.ui import safe_file_dialog
from app.ui.background_jobs import BackgroundJobs
from app.ui.settings.form import hint, show_outcome
from app.ui.settings.mcp_server_dialog import CONSENTS, McpServerDialog

if TYPE_CHECKING:  # the SDK loads when the tab is first shown, not when the dialog is built
    from app.tools.mcp.connection import ServerStatus
    from app.tools.mcp.hub import McpHub, McpLease

# A file read for an import: (its path, its servers, why not when it could not be read).
_ReadOutcome = tuple[Path, tuple[McpServerSettings, ...], "str | None"]
STATES = {"starting": "starting…", "ready": "running", "failed": "failed",
          "stopped": "stopped"}
_DESCRIPTION_SHOWN = 160


def _server_line(server: McpServerSettings, status: ServerStatus | None) -> str:
    if not server.enabled:
        state = "off"
    elif (problem := server_problem(server)) is not None:
        state = f"cannot start: {problem}"
    elif status is None:
        state = "not started"
    else:
        state = STATES.get(status.state, status.state)
        if status.state == "ready":
            state += f", {len(status.tools)} tool(s)"
        elif status.state == "failed":
            state += f": {status.message}"
    where = server.command if server.transport == "stdio" else server.url.split("?")[0]
    return visible_controls(f"{server.name} ({bounded(where, 60)}) — {state}")


class ToolsTab(QWidget):
    restart_hint = ("Applies at once: a running conversation offers the new tools from its "
                    "next question.")
    POLL_MS = 250

    def __init__(self, mcp: McpSettings, *, hub: McpHub | None = None,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._servers: list[McpServerSettings] = list(mcp.servers)
        self._hub = hub
        self._lease: McpLease | None = None
        self._leased: tuple[McpServerSettings, ...] | None = None
        self._seen_version = -1
        self._drawing = False
        self._jobs = BackgroundJobs({"import": self._imported}, parent=self)

        layout = QVBoxLayout(self)
        layout.addWidget(hint(
            "Tool servers (MCP) give the assistant your own tools: a calendar, your files, a "
            "company wiki. Add one as its documentation says, or import the mcpServers file "
            "of Claude Desktop or another app. The assistant offers their tools beside the "
            "built-in ones; a tool that changes things asks you first, unless you say so."))
        self.server_list = QListWidget()
        self.server_list.setAccessibleName("Tool servers (MCP)")
        self.server_list.setMinimumHeight(90)
        layout.addWidget(self.server_list)
        buttons = QHBoxLayout()
        self.add_button = QPushButton("Add…")
        self.edit_button = QPushButton("Edit…")
        self.remove_button = QPushButton("Remove")
        self.import_button = QPushButton("Import…")
        self.restart_button = QPushButton("Restart")
        for button in (self.add_button, self.edit_button, self.remove_button,
                       self.import_button, self.restart_button):
            buttons.addWidget(button)
        buttons.addStretch(1)
        layout.addLayout(buttons)
        self.import_status = QLabel("")
        self.import_status.setWordWrap(True)
        layout.addWidget(self.import_status)

        self.server_status = QLabel("")
        self.server_status.setWordWrap(True)
        layout.addWidget(self.server_status)
        consent_row = QHBoxLayout()
        consent_label = QLabel("Its tools that change &things:")
        consent_row.addWidget(consent_label)
        self.consent_combo = QComboBox()
        consent_label.setBuddy(self.consent_combo)
        self.consent_combo.setAccessibleName("Its tools that change things")
        for key, label in CONSENTS:
            self.consent_combo.addItem(label, key)
        consent_row.addWidget(self.consent_combo, 1)
        layout.addLayout(consent_row)
        layout.addWidget(QLabel("Its tools (untick one to keep it from the assistant):"))
        self.tool_list = QListWidget()
        self.tool_list.setAccessibleName("The server's tools")
        self.tool_list.setMinimumHeight(120)
        layout.addWidget(self.tool_list, 1)

        self.add_button.clicked.connect(self._add_clicked)
        self.edit_button.clicked.connect(self._edit_clicked)
        self.remove_button.clicked.connect(self.remove_selected)
        self.import_button.clicked.connect(self._import_clicked)
        self.restart_button.clicked.connect(self.restart_selected)
        self.server_list.currentRowChanged.connect(self._row_chosen)
        self.server_list.itemChanged.connect(self._server_checked)
        self.tool_list.itemChanged.connect(self._tool_checked)
        self.consent_combo.currentIndexChanged.connect(self._consent_chosen)
        self._timer = QTimer(self)
        self._timer.setInterval(self.POLL_MS)
        self._timer.timeout.connect(self._poll)
        self._draw()

    # ---- what the dialog asks ---------------------------------------------------------

    def settings(self) -> McpSettings:
        return McpSettings(servers=tuple(self._servers))

    def problems(self) -> list[tuple[QWidget, str]]:
        clash = names_problem(self._servers)
        return [(self.server_list, clash)] if clash else []

    def release(self) -> None:
        """The dialog closes: the tab's lease goes (on a thread: stopping waits)."""
        self._timer.stop()
        lease, self._lease, self._leased = self._lease, None, None
        if lease is not None:
            threading.Thread(target=lease.close, name="mcp-release", daemon=True).start()

    # ---- the servers --------------------------------------------------------------------

    @property
    def hub(self) -> McpHub:
        if self._hub is None:
            from app.tools.mcp.hub import shared_hub

            self._hub = shared_hub()
        return self._hub

    def showEvent(self, event: QShowEvent) -> None:  # Qt's name
        super().showEvent(event)
        self._lease_servers()
        self._timer.start()

    def _lease_servers(self) -> None:
        """Hold the enabled servers that can start: their tools are listed from them."""
        wanted = tuple(s for s in self._servers if s.enabled and server_problem(s) is None)
        if wanted == self._leased:
            return
        old = self._lease
        self._lease, self._leased = self.hub.lease(wanted), wanted
        if old is not None:
            threading.Thread(target=old.close, name="mcp-release", daemon=True).start()
        self._seen_version = -1

    def _changed(self) -> None:
        if self._timer.isActive():
            self._lease_servers()
        self._draw()

    def add_server(self, server: McpServerSettings) -> None:
        self._servers.append(server)
        self._changed()
        self.server_list.setCurrentRow(len(self._servers) - 1)

    def replace_server(self, index: int, server: McpServerSettings) -> None:
        self._servers[index] = server
        self._changed()

    def remove_selected(self) -> None:
        row = self.server_list.currentRow()
        if 0 <= row < len(self._servers):
            del self._servers[row]
            self._changed()

    def restart_selected(self) -> None:
        row = self.server_list.currentRow()
        if not 0 <= row < len(self._servers):
            return
        server = self._servers[row]
        if not server.enabled:
            show_outcome(self.server_status, f"{server.name} is off: tick it to start it.",
                         False)
            return
        name, hub = server.name, self.hub
        threading.Thread(target=hub.restart, args=(name,), name="mcp-restart",
                         daemon=True).start()
        show_outcome(self.server_status, f"Restarting {name}…", None)

    def _add_clicked(self) -> None:
        dialog = McpServerDialog(McpServerSettings(), self._servers, parent=self)
        try:
            if dialog.exec():
                self.add_server(dialog.server())
        finally:
            dialog.deleteLater()  # closed: it dies on the GUI thread

    def _edit_clicked(self) -> None:
        row = self.server_list.currentRow()
        if not 0 <= row < len(self._servers):
            return
        others = self._servers[:row] + self._servers[row + 1:]
        dialog = McpServerDialog(self._servers[row], others, parent=self)
        try:
            if dialog.exec():
                self.replace_server(row, dialog.server())
        finally:
            dialog.deleteLater()

    # ---- importing a file ---------------------------------------------------------------

    def _import_clicked(self) -> None:
        path = safe_file_dialog.open_file_name(
            self, "Import MCP servers", str(Path.home()),
            "mcpServers files (*.json);;All files (*)")
        if path:
            self.import_servers_file(Path(path))

    def import_servers_file(self, path: Path) -> None:
        """Read `path` off the GUI thread; its servers join (a name already here is
        replaced by the file's)."""
        show_outcome(self.import_status, f"Reading {bounded(str(path), 200)}…", None)
        self._jobs.start("import", _read_file(path))

    def _imported(self, outcome: object) -> None:
        if isinstance(outcome, Exception):  # a bug in the reading: said, not raised
            show_outcome(self.import_status, f"Not imported: {bounded(str(outcome), 400)}",
                         False)
            return
        path, servers, error = cast(_ReadOutcome, outcome)
        if error is not None:
            show_outcome(self.import_status, f"Not imported: {bounded(error, 400)}", False)
            return
        names = {s.name.lower(): i for i, s in enumerate(self._servers)}
        replaced = []
        for server in servers:
            index = names.get(server.name.lower())
            if index is None:
                names[server.name.lower()] = len(self._servers)
                self._servers.append(server)
            else:
                self._servers[index] = server
                replaced.append(server.name)
        self._changed()
        said = f"Imported {len(servers)} server(s) from {bounded(str(path), 200)}"
        if replaced:
            said += f" ({', '.join(replaced)} replaced by the file's)"
        show_outcome(self.import_status, visible_controls(said + "."), True)

    # ---- switches -----------------------------------------------------------------------

    def _server_checked(self, item: QListWidgetItem) -> None:
        if self._drawing:
            return
        row = self.server_list.row(item)
        enabled = item.checkState() == Qt.CheckState.Checked
        if 0 <= row < len(self._servers) and self._servers[row].enabled != enabled:
            self._servers[row] = replace(self._servers[row], enabled=enabled)
            self._changed()

    def _tool_checked(self, item: QListWidgetItem) -> None:
        if self._drawing:
            return
        row = self.server_list.currentRow()
        if not 0 <= row < len(self._servers):
            return
        tool = item.data(Qt.ItemDataRole.UserRole)
        server = self._servers[row]
        disabled = [t for t in server.disabled_tools if t != tool]
        if item.checkState() != Qt.CheckState.Checked:
            disabled.append(tool)
        self._servers[row] = replace(server, disabled_tools=tuple(disabled))

    def _consent_chosen(self) -> None:
        if self._drawing:
            return
        row = self.server_list.currentRow()
        if 0 <= row < len(self._servers):
            self._servers[row] = replace(self._servers[row],
                                         consent=self.consent_combo.currentData())

    # ---- drawing ------------------------------------------------------------------------

    def _status(self, server: McpServerSettings) -> ServerStatus | None:
        if self._hub is None and self._lease is None:
            return None  # not shown yet: nothing was started for the tab
        return self.hub.status_of(server)

    def _poll(self) -> None:
        version = self.hub.version
        if version != self._seen_version:
            self._seen_version = version
            self._draw()

    def _draw(self) -> None:
        self._drawing = True
        try:
            row = self.server_list.currentRow()
            self.server_list.clear()
            for server in self._servers:
                item = QListWidgetItem(_server_line(server, self._status(server)))
                item.setFlags(item.flags() | Qt.ItemFlag.ItemIsUserCheckable)
                item.setCheckState(Qt.CheckState.Checked if server.enabled
                                   else Qt.CheckState.Unchecked)
                self.server_list.addItem(item)
            if self._servers:
                self.server_list.setCurrentRow(min(max(row, 0), len(self._servers) - 1))
        finally:
            self._drawing = False
        self._draw_selected()

    def _row_chosen(self, _row: int) -> None:
        self._draw_selected()

    def _draw_selected(self) -> None:
        self._drawing = True
        try:
            self.tool_list.clear()
            row = self.server_list.currentRow()
            chosen = 0 <= row < len(self._servers)
            for widget in (self.edit_button, self.remove_button, self.restart_button,
                           self.consent_combo, self.tool_list):
                widget.setEnabled(chosen)
            if not chosen:
                self.server_status.setText("No server yet: Add… or Import… one."
                                           if not self._servers else "")
                return
            server = self._servers[row]
            self.consent_combo.setCurrentIndex(self.consent_combo.findData(server.consent))
            status = self._status(server)
            if status is None:
                self.server_status.setText("")
            else:
                show_outcome(self.server_status, visible_controls(
                    f"{server.name}: {bounded(status.message, 400)}"),
                    {"ready": True, "failed": False}.get(status.state))
            tools = status.tools if status is not None else ()
            for tool in tools:
                description = " ".join(tool.description.split())
                changes = " (changes things)" if needs_consent(tool.read_only,
                                                               tool.destructive) else ""
                item = QListWidgetItem(visible_controls(
                    f"{tool.name}{changes} — {bounded(description, _DESCRIPTION_SHOWN)}"))
                item.setToolTip(visible_controls(bounded(tool.description, 2000)))
                item.setData(Qt.ItemDataRole.UserRole, tool.name)
                item.setFlags(item.flags() | Qt.ItemFlag.ItemIsUserCheckable)
                item.setCheckState(Qt.CheckState.Unchecked
                                   if tool.name in server.disabled_tools
                                   else Qt.CheckState.Checked)
                self.tool_list.addItem(item)
        finally:
            self._drawing = False

    def tool_items(self) -> list[QListWidgetItem]:
        return [self.tool_list.item(i) for i in range(self.tool_list.count())]


def _read_file(path: Path) -> Callable[[], _ReadOutcome]:
    def read() -> _ReadOutcome:
        reason = safe_file_dialog.special_path_reason(path)
        if reason is not None:
            return path, (), reason
        try:
            return path, read_servers_file(path), None
        except McpConfigError as exc:
            return path, (), str(exc)

    return read
