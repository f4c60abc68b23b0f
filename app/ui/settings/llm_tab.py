"""Settings → Assistant (LLM): the server and model, with a connection test that fills the
model list, the reply timeout, the tools and the folders they may read, and the speech
recognition that turns the user's words into the assistant's questions.

The connection test asks the network, so it runs on the Qt thread pool with its own
deadline; an answer about a server the user has changed since is dropped, and a result shown
is cleared as soon as the backend, the server or the model changes: it was about another one.

The server address and the reply timeout are checked as they are typed, and what is wrong is
said in red under the field (`problems()`); the dialog's OK refuses them, on this tab, rather
than saving a setting that makes every turn fail.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace

from PySide6.QtCore import QTimer, Slot
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.checkpoints.catalog import CatalogError, developer_models_wanted
from app.llm.backend import BackendHealth, LLMBackend, LLMError
from app.llm.factory import make_backend
from app.llm_backends import (
    LLM_BACKENDS,
    NO_LLM,
    NO_LLM_LABEL,
    OLLAMA,
    OLLAMA_BACKEND,
    llm_backend_kind,
)
from app.settings.schema import LlmSettings
from app.settings.store import field_range
from app.text_bounds import bounded
from app.tools.default_tools import ALL_TOOLS
from app.ui import safe_file_dialog
from app.ui.accessible_names import name_form_rows
from app.ui.background_jobs import BackgroundJobs
from app.ui.settings.address_check import address_problem
from app.ui.settings.form import FAILED_COLOR, form_on, show_outcome

# (name, label) for the backend list: the registry's, then none.
BACKENDS = (*((kind.name, kind.label) for kind in LLM_BACKENDS), (NO_LLM, NO_LLM_LABEL))
DEFAULT_HOSTS = {kind.name: kind.default_host for kind in LLM_BACKENDS}
TOOL_LABELS = {
    "calculator": "Calculator",
    "clock": "Clock and date",
    "local_search": "Search my folders",
    "web_fetch": "Read web pages",
    "web_search": "Web search",
}
STT_NONE = ("none", "None (typed questions only)")


def _timeout_range() -> tuple[float, float]:
    bounds = field_range(LlmSettings, "timeout_s")
    assert bounds is not None, "the schema gives the reply timeout a range"
    return bounds


TIMEOUT_RANGE = _timeout_range()  # the store's own check, so the two never disagree
_HOST_SHOWN = 80  # characters of the server address quoted in the status line
_MESSAGE_SHOWN = 600  # characters of a server's answer or error shown
HOST_PLACEHOLDERS = {kind.name: kind.host_placeholder for kind in LLM_BACKENDS}


def host_problem(host: str, backend: str = OLLAMA) -> str | None:
    """Why `host` cannot be `backend`'s server address (None: it can): an http or https URL
    with a host name. Ollama's may be empty (its own default, as app.llm.factory reads it)
    or `host:port`, as OLLAMA_HOST is written (Ollama's client assumes http, as the speech
    server's field does); an OpenAI-compatible server has no default, and its client needs
    the scheme."""
    host = host.strip()
    kind = llm_backend_kind(backend) or OLLAMA_BACKEND
    example = "for example " + kind.default_host
    if not host:
        if not kind.host_required:
            return None
        return f"Enter the server's address, {example}."
    return address_problem(host, ("http", "https"), example,
                           bare_host_scheme=kind.bare_host_scheme)


def timeout_problem(seconds: float) -> str | None:
    """Why `seconds` cannot be the reply timeout (the schema's range), or None."""
    low, high = TIMEOUT_RANGE
    if low <= seconds <= high:
        return None
    return f"The reply timeout must be from {low:g} to {high:g} s (it is {seconds:g} s)."


def _problem_label() -> QLabel:
    label = QLabel("")
    label.setWordWrap(True)
    label.setStyleSheet(f"color: {FAILED_COLOR}")
    label.setVisible(False)
    return label


# A backend for the connection test, built from the form's LLM settings and a timeout.
BackendFactory = Callable[[LlmSettings, float], LLMBackend]


def connection_test_backend(llm: LlmSettings, timeout_s: float) -> LLMBackend:
    """The backend the app would use (app.llm.factory), with the test's timeout. Raises
    ValueError for "none" (nothing to test) and an OpenAI-compatible server without a URL."""
    return make_backend(llm.backend, llm.host, llm.model, timeout_s=timeout_s,
                        flag="a server address")


def check_connection(factory: BackendFactory, llm: LlmSettings, timeout_s: float) -> BackendHealth:
    """Health of the server, with its model list. With no model chosen yet, a reachable
    server is a success: the point is to fill the list to choose from."""
    backend = factory(llm, timeout_s)
    try:
        if not llm.model:
            models = tuple(backend.list_models())
            return BackendHealth(True, f"Connected: {len(models)} model(s) available.", models)
        return backend.health()
    finally:
        close = getattr(backend, "close", None)
        if callable(close):
            close()


def _stt_models(chosen: str) -> dict[str, str]:
    """The recognisers offered: a developer's one (random weights) only when asked for
    (app.checkpoints.catalog.developer_models_wanted) or when `chosen` already."""
    # Imported here: the STT catalog pulls in torch and moshi, which the dialog itself does
    # not need (the app has them loaded by the time the dialog opens).
    from app.asr.stt_catalog import load_stt_catalog

    developer = developer_models_wanted()
    return {m.id: m.display_name for m in load_stt_catalog().values()
            if developer or not m.for_developers or m.id == chosen}


class LlmTab(QWidget):
    restart_hint = "Applies at once, except speech recognition (after a restart)."

    #: The connection test's backend timeout, and the extra wait before the tab gives up on
    #: an answer (the backend's own timeouts should have fired by then).
    connection_timeout_s: float = 8.0
    connection_grace_s: float = 2.0

    def __init__(
        self,
        llm: LlmSettings,
        *,
        stt_models: Mapping[str, str] | None = None,
        backend_factory: BackendFactory = connection_test_backend,
        parent: QWidget | None = None,
    ) -> None:
        """`stt_models` (id -> name) None: the app's own STT catalog."""
        super().__init__(parent)
        self._initial = llm
        self._backend_factory = backend_factory
        self._connection_pending = False
        self._focus_parked = False
        self._refusal: str | None = None  # what the last test of the current target said
        self._jobs = BackgroundJobs({"connection": self._connection_tested}, parent=self)
        self._watchdog = QTimer(self)  # the connection test's own deadline
        self._watchdog.setSingleShot(True)
        self._watchdog.timeout.connect(self._connection_timed_out)
        self._watchdog_number = 0
        if stt_models is None:
            try:
                stt_models = _stt_models(llm.stt_model)
            except CatalogError:
                stt_models = {}
        form = form_on(self)

        self.backend_combo = QComboBox()
        for key, label in BACKENDS:
            self.backend_combo.addItem(label, key)
        self.backend_combo.setCurrentIndex(max(0, self.backend_combo.findData(llm.backend)))
        self._backend = self.backend_combo.currentData()
        self.backend_combo.currentIndexChanged.connect(self._backend_changed)
        form.addRow("Backend:", self.backend_combo)

        self.host_edit = QLineEdit(llm.host)
        self.host_edit.textChanged.connect(self._connection_target_changed)
        form.addRow("Server:", self.host_edit)
        self.host_problem = _problem_label()
        form.addRow("", self.host_problem)

        self.llm_model_combo = QComboBox()
        self.llm_model_combo.setEditable(True)
        self.llm_model_combo.setCurrentText(llm.model)
        model_line = self.llm_model_combo.lineEdit()
        assert model_line is not None  # an editable combo box has one
        model_line.setPlaceholderText("Test the connection to list models")
        self._filling_models = False  # the test's own answer fills the list: not a change
        self.llm_model_combo.currentTextChanged.connect(self._model_changed)
        self.test_button = QPushButton("Test connection")
        self.test_button.clicked.connect(self.test_connection)
        row = QHBoxLayout()
        row.addWidget(self.llm_model_combo, 1)
        row.addWidget(self.test_button)
        form.addRow("Model:", row)
        self.connection_status = QLabel("")
        self.connection_status.setWordWrap(True)
        form.addRow("", self.connection_status)

        # The spin box takes more than the schema allows, so a value out of range is shown
        # as typed and said to be wrong, not silently moved to the nearest limit.
        self.timeout_spin = QDoubleSpinBox()
        self.timeout_spin.setRange(0.0, 10 * TIMEOUT_RANGE[1])
        self.timeout_spin.setDecimals(1)
        self.timeout_spin.setSuffix(" s")
        self.timeout_spin.setValue(llm.timeout_s)
        self.timeout_spin.setToolTip(
            f"From {TIMEOUT_RANGE[0]:g} to {TIMEOUT_RANGE[1]:g} seconds")
        self.timeout_spin.valueChanged.connect(self._show_problems)
        form.addRow("Reply timeout:", self.timeout_spin)
        self.timeout_problem = _problem_label()
        form.addRow("", self.timeout_problem)

        self.tools_group = QGroupBox("Let the assistant use tools")
        self.tools_group.setCheckable(True)
        self.tools_group.setChecked(llm.tools_enabled)
        tools_layout = QVBoxLayout(self.tools_group)
        self.tool_checks: dict[str, QCheckBox] = {}
        for name in ALL_TOOLS:
            check = QCheckBox(TOOL_LABELS.get(name, name))
            check.setChecked(name in llm.tools)
            tools_layout.addWidget(check)
            self.tool_checks[name] = check
        tools_layout.addWidget(QLabel("Folders that “Search my folders” may read:"))
        self.folders_list = QListWidget()
        self.folders_list.addItems(list(llm.search_folders))
        self.folders_list.setMaximumHeight(90)
        tools_layout.addWidget(self.folders_list)
        add, remove = QPushButton("Add folder…"), QPushButton("Remove")
        add.clicked.connect(self._add_search_folder)
        remove.clicked.connect(self._remove_search_folder)
        self.add_folder_button, self.remove_folder_button = add, remove
        row = QHBoxLayout()
        row.addWidget(add)
        row.addWidget(remove)
        row.addStretch(1)
        tools_layout.addLayout(row)
        form.addRow(self.tools_group)

        self.stt_combo = QComboBox()
        for model_id, name in stt_models.items():
            self.stt_combo.addItem(name, model_id)
        if self.stt_combo.findData(STT_NONE[0]) < 0:
            self.stt_combo.addItem(STT_NONE[1], STT_NONE[0])
        if self.stt_combo.findData(llm.stt_model) < 0:
            self.stt_combo.addItem(f"{llm.stt_model} (not in the catalog)", llm.stt_model)
        self.stt_combo.setCurrentIndex(self.stt_combo.findData(llm.stt_model))
        form.addRow("Speech recognition:", self.stt_combo)
        self.folders_list.setAccessibleName("Folders that “Search my folders” may read")
        name_form_rows(form)
        self._backend_changed()

    def problems(self) -> list[tuple[QWidget, str]]:
        """What the tab cannot save as it is: (the field, why). Nothing is checked for the
        "none" backend, which uses neither the server nor the timeout."""
        if self.backend_combo.currentData() == NO_LLM:
            return []
        found: list[tuple[QWidget, str]] = []
        host = host_problem(self.host_edit.text(), self.backend_combo.currentData())
        if host:
            found.append((self.host_edit, host))
        timeout = timeout_problem(float(self.timeout_spin.value()))
        if timeout:
            found.append((self.timeout_spin, timeout))
        return found

    def _show_problems(self) -> None:
        """Each field's problem under it, as it is typed."""
        said = dict(self.problems())
        for field, label in ((self.host_edit, self.host_problem),
                             (self.timeout_spin, self.timeout_problem)):
            label.setText(said.get(field, ""))
            label.setVisible(field in said)
        self.test_button.setEnabled(self.backend_combo.currentData() != NO_LLM
                                    and self.host_edit not in said
                                    and not self._connection_pending)

    def settings(self) -> LlmSettings:
        """The LLM settings as the tab shows them now; one it has no control for (a hand
        edit's `end_of_turn`) stays as it was."""
        return replace(
            self._initial,
            backend=self.backend_combo.currentData(),
            host=self.host_edit.text().strip(),
            model=self.llm_model_combo.currentText().strip(),
            timeout_s=float(self.timeout_spin.value()),
            tools_enabled=self.tools_group.isChecked(),
            tools=self._checked_tools(),
            search_folders=tuple(
                self.folders_list.item(i).text() for i in range(self.folders_list.count())
            ),
            stt_model=self.stt_combo.currentData() or self._initial.stt_model,
        )

    def _checked_tools(self) -> tuple[str, ...]:
        """Checked tools, in the order the settings listed them, new ones after."""
        checked = [name for name, box in self.tool_checks.items() if box.isChecked()]
        ordered = [name for name in self._initial.tools if name in checked]
        return tuple(ordered + [name for name in checked if name not in ordered])

    # -- search folders ----------------------------------------------------------------------

    def _add_search_folder(self) -> None:
        folder = safe_file_dialog.existing_directory(self,
                                                     "Choose a folder the assistant may search")
        if folder:
            self.add_search_folder(folder)

    def add_search_folder(self, folder: str) -> None:
        existing = {self.folders_list.item(i).text() for i in range(self.folders_list.count())}
        if folder not in existing:
            self.folders_list.addItem(folder)

    def _remove_search_folder(self) -> None:
        for item in self.folders_list.selectedItems():
            self.folders_list.takeItem(self.folders_list.row(item))

    # -- the connection test -----------------------------------------------------------------

    def _backend_changed(self) -> None:
        """A host left at one backend's default follows the switch to the other's default."""
        new = self.backend_combo.currentData()
        old, self._backend = self._backend, new
        if self.host_edit.text().strip() == DEFAULT_HOSTS.get(old) and new in DEFAULT_HOSTS:
            self.host_edit.setText(DEFAULT_HOSTS[new])
        self.host_edit.setPlaceholderText(HOST_PLACEHOLDERS.get(new, ""))
        enabled = new != NO_LLM
        for widget in (self.host_edit, self.llm_model_combo, self.timeout_spin):
            widget.setEnabled(enabled)
        self._connection_target_changed()

    def _model_changed(self) -> None:
        if not self._filling_models:
            self._connection_target_changed()

    def _connection_target_changed(self) -> None:
        """Whatever test is running asked about another server or model: its answer is
        dropped, and a result already shown is cleared (it was about the other one)."""
        self._jobs.drop("connection")
        if self._connection_pending:
            self._connection_pending = False
            self._show_connection("The server or model changed; the earlier test was "
                                  "dropped.", None)
        else:
            self._show_connection("", None)
        self._watchdog.stop()
        self.test_button.setText("Test connection")
        self._show_problems()

    def test_connection(self) -> None:
        """Ask the server for its health and model list, off the GUI thread."""
        llm = self.settings()
        if llm.backend == NO_LLM or host_problem(llm.host, llm.backend):
            return  # the host's problem is shown under it
        timeout = self.connection_timeout_s
        factory = self._backend_factory
        self._connection_pending = True
        # Disabling the focused button would hand the focus to the next field (the timeout);
        # park it on the model list the test fills, and give it back when the test ends.
        self._focus_parked = self.test_button.hasFocus()
        if self._focus_parked:
            self.llm_model_combo.setFocus()
        self.test_button.setEnabled(False)
        self.test_button.setText("Testing…")
        self._show_connection(f"Connecting to {bounded(llm.host, _HOST_SHOWN)}…", None)
        self._watchdog_number = self._jobs.start(
            "connection", lambda: check_connection(factory, llm, timeout)
        )
        self._watchdog.start(int((timeout + self.connection_grace_s) * 1000))

    def _test_button_back(self) -> None:
        self.test_button.setEnabled(True)
        self.test_button.setText("Test connection")
        parked, self._focus_parked = self._focus_parked, False
        if parked and self.llm_model_combo.hasFocus():  # the user has not moved on
            self.test_button.setFocus()

    @Slot()
    def _connection_timed_out(self) -> None:
        if not self._jobs.is_current("connection", self._watchdog_number):
            return
        if not self._connection_pending:
            return
        seconds = self._watchdog.interval() / 1000
        self._jobs.drop("connection")  # a late answer is dropped
        self._connection_pending = False
        self._test_button_back()
        host = bounded(self.host_edit.text().strip(), _HOST_SHOWN)
        self._show_connection(f"No answer from {host} within {seconds:g} s.", False)

    def _connection_tested(self, result: object) -> None:
        self._connection_pending = False
        self._watchdog.stop()
        self._test_button_back()
        # A server's answer is its data: bounded, however long it is.
        if isinstance(result, LLMError):
            self._show_connection(bounded(str(result), _MESSAGE_SHOWN), False)
            return
        if isinstance(result, Exception):
            self._show_connection(f"The test failed: {bounded(str(result), _MESSAGE_SHOWN)}",
                                  False)
            return
        assert isinstance(result, BackendHealth)
        if result.models:
            current = self.llm_model_combo.currentText().strip()
            self._filling_models = True
            try:
                self.llm_model_combo.clear()
                self.llm_model_combo.addItems(list(result.models))
                self.llm_model_combo.setCurrentText(current or result.models[0])
            finally:
                self._filling_models = False
        self._show_connection(bounded(result.message, _MESSAGE_SHOWN), result.ok)

    def _show_connection(self, text: str, ok: bool | None) -> None:
        self._refusal = text if ok is False else None  # any change of target clears it
        show_outcome(self.connection_status, text, ok)

    def refused(self) -> str | None:
        """Why Test connection refused the server and model the tab shows now (None: it
        did not, or no test of them ran)."""
        return self._refusal if self.backend_combo.currentData() != NO_LLM else None
