"""Settings → Speech model → "Speech engine": this computer, or a server (URL and token),
with a "Test connection" that shows the round trip, and whether the server's speech
recognition hears the user (`serve --asr`) instead of a recogniser on this computer.
In the thin client's install (no torch) "This computer" says that it needs the full install.

The test runs on the Qt thread pool (app/conversation/server_reach.py: a plain connection
that says in words when nothing is there, then app/remote/probe.py's few HTTP requests,
bounded by timeouts) and its answer comes back by a queued signal; an answer about a URL or
token the user has changed since is dropped. A server address the client could not use is
said under it as it is typed, and the dialog's OK does not save it (as the LLM tab's host).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QButtonGroup,
    QCheckBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QRadioButton,
    QWidget,
)

from app.conversation.server_reach import check_speech_server
from app.install_kind import engine_installed, needs_full_install
from app.remote.probe import ServerProbe
from app.settings.schema import EngineMode, EngineSettings
from app.text_bounds import NOTICE_LIMIT, bounded
from app.ui.accessible_names import name_form_rows
from app.ui.background_jobs import BackgroundJobs
from app.ui.settings.address_check import address_problem
from app.ui.settings.form import FAILED_COLOR, show_outcome

# (url, token or None, timeout in seconds) -> the server's answer; never raises for the
# network (app.conversation.server_reach.check_speech_server).
ProbeServer = Callable[[str, str | None, float], ServerProbe]
URL_EXAMPLE = "for example http://gpu-box:8998"


def server_url_problem(url: str) -> str | None:
    """Why `url` cannot be the speech server's address (None: it can). The client takes
    `host:port` (http assumed) or an http, https, ws or wss URL with a host name
    (app/wire/client.ws_url, app/remote/probe.base_url)."""
    url = url.strip()
    if not url:
        return f"Enter the server's address, {URL_EXAMPLE}."
    return address_problem(url, ("http", "https", "ws", "wss"), URL_EXAMPLE,
                           bare_host_scheme="http")


class SpeechEngineBox(QGroupBox):
    mode_changed = Signal(str)  # "local" or "server"
    probe_timeout_s: float = 5.0

    def __init__(self, engine: EngineSettings, probe: ProbeServer = check_speech_server,
                 parent: QWidget | None = None) -> None:
        super().__init__("Speech engine", parent)
        self._probe = probe
        self._refusal: str | None = None  # what the last test of the current target said
        self._jobs = BackgroundJobs({"probe": self._tested}, parent=self)
        form = QFormLayout(self)

        self.local_radio = QRadioButton("This computer")
        self.server_radio = QRadioButton("Server")
        self.server_radio.setToolTip("A GPU machine running `python main.py serve`; the "
                                     "assistant (LLM) stays here, speech recognition too "
                                     "unless the server's is chosen below.")
        group = QButtonGroup(self)
        group.addButton(self.local_radio)
        group.addButton(self.server_radio)
        (self.server_radio if engine.mode == "server" else self.local_radio).setChecked(True)
        row = QHBoxLayout()
        row.addWidget(self.local_radio)
        row.addWidget(self.server_radio)
        row.addStretch(1)
        form.addRow("Runs on:", row)
        self.install_note = QLabel("")  # the thin client's install: no local engine
        self.install_note.setWordWrap(True)
        self.install_note.setStyleSheet(f"color: {FAILED_COLOR}")
        self.install_note.setVisible(False)
        self.engine_here = engine_installed()
        if not self.engine_here:
            self.install_note.setText(needs_full_install("The speech model on this computer"))
        form.addRow("", self.install_note)

        self.url_edit = QLineEdit(engine.server_url)
        self.url_edit.setPlaceholderText("http://gpu-box:8998")
        form.addRow("Server:", self.url_edit)
        self.url_problem = QLabel("")  # why the address cannot be used, as it is typed
        self.url_problem.setWordWrap(True)
        self.url_problem.setStyleSheet(f"color: {FAILED_COLOR}")
        self.url_problem.setVisible(False)
        form.addRow("", self.url_problem)
        self.token_edit = QLineEdit(engine.server_token)
        self.token_edit.setEchoMode(QLineEdit.EchoMode.Password)
        self.token_edit.setPlaceholderText("The server's --token (empty: none)")
        self.test_button = QPushButton("Test connection")
        self.test_button.clicked.connect(self.test_connection)
        row = QHBoxLayout()
        row.addWidget(self.token_edit, 1)
        row.addWidget(self.test_button)
        form.addRow("Token:", row)
        self.status = QLabel("")
        self.status.setWordWrap(True)
        form.addRow("", self.status)
        self.asr_check = QCheckBox("Speech recognition on the server")
        self.asr_check.setChecked(engine.asr_on_server)
        self.asr_check.setToolTip(
            "The server's recogniser (started with `serve --asr`) hears you and sends your "
            "words here, instead of one on this computer: the choice for a laptop whose CPU "
            "cannot run the recogniser in real time, or an install without one.")
        form.addRow("", self.asr_check)

        name_form_rows(form)
        self.url_edit.textChanged.connect(self._target_changed)
        self.token_edit.textChanged.connect(self._target_changed)
        self.server_radio.toggled.connect(self._mode_toggled)
        self._mode_toggled()

    @property
    def mode(self) -> EngineMode:
        return "server" if self.server_radio.isChecked() else "local"

    def settings(self, initial: EngineSettings) -> EngineSettings:
        return replace(initial, mode=self.mode, server_url=self.url_edit.text().strip(),
                       server_token=self.token_edit.text().strip(),
                       asr_on_server=self.asr_check.isChecked())

    def problems(self) -> list[tuple[QWidget, str]]:
        """What cannot be saved as it is: (the field, why). The address is checked only
        when the speech model runs on a server."""
        if self.mode != "server":
            return []
        problem = server_url_problem(self.url_edit.text())
        return [(self.url_edit, problem)] if problem else []

    def _show_problems(self) -> None:
        problems = dict(self.problems())
        self.url_problem.setText(problems.get(self.url_edit, ""))
        self.url_problem.setVisible(self.url_edit in problems)
        if self.test_button.text() != "Testing…":  # a test running keeps its button
            self.test_button.setEnabled(self.mode == "server" and not problems)

    def _mode_toggled(self, _checked: bool = False) -> None:
        server = self.mode == "server"
        for widget in (self.url_edit, self.token_edit, self.test_button, self.asr_check):
            widget.setEnabled(server)
        self.install_note.setVisible(not server and not self.engine_here)
        self._show_problems()
        self.mode_changed.emit(self.mode)

    def _target_changed(self) -> None:
        """A test still running asked about another server or token: its answer is dropped."""
        if not self.test_button.isEnabled() and self.mode == "server":
            self.test_button.setEnabled(True)
            self.test_button.setText("Test connection")
        self._jobs.drop("probe")
        self._show("", None)
        self._show_problems()

    def test_connection(self) -> None:
        """Ask the server off the GUI thread; the answer comes back to `_tested`."""
        probe = self._probe
        url, token = self.url_edit.text().strip(), self.token_edit.text().strip() or None
        timeout = self.probe_timeout_s
        self.test_button.setEnabled(False)
        self.test_button.setText("Testing…")
        self._show(f"Connecting to {bounded(url)}…", None)
        self._jobs.start("probe", lambda: probe(url, token, timeout))

    def _tested(self, result: object) -> None:
        """The current test's answer (one for another URL or token was dropped)."""
        self.test_button.setText("Test connection")
        self._show_problems()  # the button again, if the address can be tested
        if isinstance(result, ServerProbe):
            self._show(bounded(result.message, NOTICE_LIMIT), result.ok)
        else:
            self._show(f"The test failed: {bounded(str(result))}", False)

    def _show(self, text: str, ok: bool | None) -> None:
        self._refusal = text if ok is False else None  # any change of target clears it
        show_outcome(self.status, text, ok)

    def refused(self) -> str | None:
        """Why Test connection refused the server and token shown now (None: it did not, no
        test of them ran, or the speech model runs on this computer)."""
        return self._refusal if self.mode == "server" else None
