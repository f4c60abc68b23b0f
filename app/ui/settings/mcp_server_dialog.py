"""Add or edit one MCP server (Settings → Tools → Add… / Edit…): a stdio server's command,
arguments and environment, or a streamable-HTTP server's URL and headers, its permission
for tools that change things, and how long a call may take.

What cannot work is said in red under the form as it is typed, and OK keeps the dialog open
until it is mended (app/tools/mcp/servers_file.py decides, as it does for an imported file).
The environment and the headers are shown as typed (their owner is editing them), never
logged.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFormLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QVBoxLayout,
    QWidget,
)

from app.settings.schema import McpServerSettings
from app.settings.store import field_range
from app.tools.mcp.servers_file import names_problem, server_problem
from app.ui.settings.form import FAILED_COLOR, hint

CONSENTS = (("ask", "Ask me each time"), ("always", "Always allow"), ("never", "Never allow"))
TRANSPORTS = (("stdio", "A program on this computer (stdio)"),
              ("http", "A server at an address (streamable HTTP)"))
_TIMEOUTS = field_range(McpServerSettings, "timeout_s") or (1.0, 600.0)


def _lines(edit: QPlainTextEdit) -> tuple[str, ...]:
    return tuple(line.strip() for line in edit.toPlainText().splitlines() if line.strip())


class McpServerDialog(QDialog):
    def __init__(self, server: McpServerSettings, others: Sequence[McpServerSettings] = (),
                 parent: QWidget | None = None) -> None:
        """`others`: the other servers (a name must stay unique among them)."""
        super().__init__(parent)
        self.setWindowTitle("MCP server" if not server.name else f"MCP server {server.name}")
        self.setMinimumWidth(520)
        self._initial = server
        self._others = tuple(others)
        outer = QVBoxLayout(self)
        form = QFormLayout()
        outer.addLayout(form)

        self.name_edit = QLineEdit(server.name)
        self.name_edit.setPlaceholderText("e.g. calendar")
        form.addRow("Name:", self.name_edit)
        self.transport_combo = QComboBox()
        for key, label in TRANSPORTS:
            self.transport_combo.addItem(label, key)
        self.transport_combo.setCurrentIndex(
            self.transport_combo.findData(server.transport if (server.command or server.url)
                                          else "stdio"))
        form.addRow("Kind:", self.transport_combo)

        self.command_edit = QLineEdit(server.command)
        self.command_edit.setPlaceholderText("npx, uvx, python, or a program's path")
        form.addRow("Command:", self.command_edit)
        self.args_edit = QPlainTextEdit("\n".join(server.args))
        self.args_edit.setPlaceholderText("One argument per line")
        self.args_edit.setMaximumHeight(80)
        form.addRow("Arguments:", self.args_edit)
        self.env_edit = QPlainTextEdit("\n".join(server.env))
        self.env_edit.setPlaceholderText("NAME=value, one per line (API keys go here)")
        self.env_edit.setMaximumHeight(70)
        form.addRow("Environment:", self.env_edit)

        self.url_edit = QLineEdit(server.url)
        self.url_edit.setPlaceholderText("https://example.com/mcp")
        form.addRow("URL:", self.url_edit)
        self.headers_edit = QPlainTextEdit("\n".join(server.headers))
        self.headers_edit.setPlaceholderText("Name: value, one per line "
                                             "(e.g. Authorization: Bearer …)")
        self.headers_edit.setMaximumHeight(70)
        form.addRow("Headers:", self.headers_edit)

        self.consent_combo = QComboBox()
        for key, label in CONSENTS:
            self.consent_combo.addItem(label, key)
        self.consent_combo.setCurrentIndex(self.consent_combo.findData(server.consent))
        form.addRow("Tools that change things:", self.consent_combo)
        self.timeout_spin = QDoubleSpinBox()
        self.timeout_spin.setRange(*_TIMEOUTS)
        self.timeout_spin.setDecimals(0)
        self.timeout_spin.setSuffix(" s")
        self.timeout_spin.setValue(server.timeout_s)
        form.addRow("A call may take:", self.timeout_spin)
        outer.addWidget(hint("Secrets in the environment and the headers are kept in your "
                             "settings file and never written to the log or a transcript."))
        self.problem_label = QLabel("")
        self.problem_label.setWordWrap(True)
        self.problem_label.setStyleSheet(f"color: {FAILED_COLOR}")
        outer.addWidget(self.problem_label)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok
                                   | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        outer.addWidget(buttons)

        for edit in (self.name_edit, self.command_edit, self.url_edit):
            edit.textChanged.connect(self._show_problem)
        for text in (self.args_edit, self.env_edit, self.headers_edit):
            text.textChanged.connect(self._show_problem)
        self.transport_combo.currentIndexChanged.connect(self._transport_changed)
        self._transport_changed()

    def _transport_changed(self) -> None:
        stdio = self.transport_combo.currentData() == "stdio"
        for widget in (self.command_edit, self.args_edit, self.env_edit):
            widget.setEnabled(stdio)
        for widget in (self.url_edit, self.headers_edit):
            widget.setEnabled(not stdio)
        self._show_problem()

    def server(self) -> McpServerSettings:
        """The server as the form shows it (the other kind's fields left out)."""
        stdio = self.transport_combo.currentData() == "stdio"
        return replace(
            self._initial, name=self.name_edit.text().strip(),
            command=self.command_edit.text().strip() if stdio else "",
            # An argument may hold spaces: only the empty lines are dropped.
            args=tuple(a for a in self.args_edit.toPlainText().splitlines() if a) if stdio
            else (),
            env=_lines(self.env_edit) if stdio else (),
            url=self.url_edit.text().strip() if not stdio else "",
            headers=_lines(self.headers_edit) if not stdio else (),
            consent=self.consent_combo.currentData(), timeout_s=self.timeout_spin.value())

    def problem(self) -> str | None:
        server = self.server()
        return server_problem(server) or names_problem([*self._others, server])

    def _show_problem(self) -> None:
        self.problem_label.setText(self.problem() or "")

    def accept(self) -> None:
        problem = self.problem()
        if problem:
            self.problem_label.setText(problem)
            return
        super().accept()
