"""The settings dialog: one tab per part of AppSettings, OK and Cancel, and `settings()`.

Each tab is its own file (speech_tab, audio_tab, llm_tab) and edits its own part; this shell
holds them, says what applies when during a conversation, and puts the parts back together.
Everything slow runs off the GUI thread inside the tabs (background_jobs.py).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QLabel,
    QMessageBox,
    QVBoxLayout,
    QWidget,
)

from app.checkpoints.catalog import Manifest
from app.conversation.server_reach import check_speech_server
from app.settings.schema import AppSettings
from app.text_bounds import bounded
from app.ui.memory_plan_view import Survey, survey_settings
from app.ui.screen_fit import ScrollingTabs, fit_when_shown
from app.ui.settings.audio_tab import AudioTab, ListDevices, MicLevelProbe, PlayTestTone
from app.ui.settings.engine_box import ProbeServer
from app.ui.settings.form import hint, put_on_top
from app.ui.settings.llm_tab import BackendFactory, LlmTab, connection_test_backend
from app.ui.settings.speech_tab import DeviceSurvey, ListVoices, SpeechTab, list_persona_voices
from app.ui.settings.tools_tab import ToolsTab

if TYPE_CHECKING:
    from app.tools.mcp.hub import McpHub

RESTART_NOTE = (
    "A conversation is running. The assistant (LLM, server, model, timeout, tools, tool "
    "servers and folders), the echo mode and the voice levelling apply at once; the rest "
    "applies after a restart of the conversation, which the window offers after OK (the "
    "transcript stays)."
)


def _weak_call(method: Callable[[], AppSettings]) -> Callable[[], AppSettings]:
    """`method`, called through a weak reference to its object (alive while it is asked)."""
    weak = weakref.WeakMethod(method)

    def call() -> AppSettings:
        alive = weak()
        assert alive is not None, "asked after its dialog was freed"
        return alive()

    return call


class SettingsDialog(QDialog):
    """Edits a copy of AppSettings; `settings()` returns the edited one (Ok or not).

    The tabs' fields are reached through the dialog by name too (`dialog.host_edit` is
    `dialog.llm_tab.host_edit`): the window and the tests drive the dialog as one form.
    """

    def __init__(
        self,
        settings: AppSettings,
        parent: QWidget | None = None,
        *,
        catalog: Mapping[str, Manifest] | None = None,
        stt_models: Mapping[str, str] | None = None,
        list_devices: ListDevices | None = None,
        mic_level_probe: MicLevelProbe | None = None,
        play_test_tone: PlayTestTone | None = None,
        backend_factory: BackendFactory = connection_test_backend,
        list_voices: ListVoices = list_persona_voices,
        server_probe: ProbeServer = check_speech_server,
        conversation_running: bool = False,
        memory_survey: Survey = survey_settings,
        device_survey: DeviceSurvey | None = None,
        mcp_hub: McpHub | None = None,
    ) -> None:
        """`conversation_running`: opened during a conversation, the dialog says which
        settings apply at once and which after a restart of the conversation. `mcp_hub`:
        where Settings → Tools runs the MCP servers (None: the process's own)."""
        super().__init__(parent)
        self.setWindowTitle("ContextSpan settings")
        self.setMinimumWidth(600)
        self._initial = settings
        # What OK saved although Test connection had refused it ("the speech server at …"):
        # the app keeps it for the next conversation and leaves the running one alone.
        self.saved_refused: tuple[str, ...] = ()
        self.speech_tab = SpeechTab(settings.speech, settings.engine, catalog=catalog,
                                    list_voices=list_voices, server_probe=server_probe,
                                    memory_survey=memory_survey, device_survey=device_survey)
        self.audio_tab = AudioTab(settings.audio, list_devices=list_devices,
                                  mic_level_probe=mic_level_probe,
                                  play_test_tone=play_test_tone)
        self.llm_tab = LlmTab(settings.llm, stt_models=stt_models,
                              backend_factory=backend_factory)
        self.tools_tab = ToolsTab(settings.mcp, hub=mcp_hub)
        self._tabs = (self.speech_tab, self.audio_tab, self.llm_tab, self.tools_tab)
        self.engine_box = self.speech_tab.engine_box
        # The memory plan counts the LLM tab's model too: it plans for the whole dialog, and
        # again when the speech tab is shown after the other tabs were changed.
        # Held weakly: the tab holding the dialog's own method would make them a cycle.
        self.speech_tab.plan_settings = _weak_call(self.settings)

        self.tabs = ScrollingTabs()  # a page taller than the screen scrolls; OK stays seen
        self.tabs.addTab(self.speech_tab, "Speech model")
        self.tabs.addTab(self.audio_tab, "Audio")
        self.tabs.addTab(self.llm_tab, "Assistant (LLM)")
        self.tabs.addTab(self.tools_tab, "Tools")
        self.tabs.currentChanged.connect(self._tab_shown)
        buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel
        )
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        self.restart_note = QLabel(RESTART_NOTE)
        self.restart_note.setWordWrap(True)
        self.restart_note.setVisible(conversation_running)
        layout.addWidget(self.restart_note)
        layout.addWidget(self.tabs)
        layout.addWidget(buttons)
        self._restart_hints: list[QLabel] = []
        for tab in self._tabs:
            restart_hint = hint(tab.restart_hint)
            restart_hint.setVisible(conversation_running)
            put_on_top(tab, restart_hint)
            self._restart_hints.append(restart_hint)
        fit_when_shown(self)  # as large as its pages where the screen has room

    def _tab_shown(self, index: int) -> None:
        if self.tabs.widget(index) is self.speech_tab:
            self.speech_tab.refresh_plan()

    def __getattr__(self, name: str) -> Any:
        """A field of one of the tabs (only asked for names the dialog itself lacks)."""
        for tab in self.__dict__.get("_tabs", ()):
            if hasattr(tab, name):
                return getattr(tab, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    # The connection test's timeouts are the LLM tab's; set here, they reach it.
    @property
    def connection_timeout_s(self) -> float:
        return self.llm_tab.connection_timeout_s

    @connection_timeout_s.setter
    def connection_timeout_s(self, seconds: float) -> None:
        self.llm_tab.connection_timeout_s = seconds

    @property
    def connection_grace_s(self) -> float:
        return self.llm_tab.connection_grace_s

    @connection_grace_s.setter
    def connection_grace_s(self, seconds: float) -> None:
        self.llm_tab.connection_grace_s = seconds

    def settings(self) -> AppSettings:
        """The settings as the form shows them now."""
        return replace(self._initial, speech=self.speech_tab.settings(),
                       audio=self.audio_tab.settings(), llm=self.llm_tab.settings(),
                       engine=self.engine_box.settings(self._initial.engine),
                       mcp=self.tools_tab.settings())

    def accept(self) -> None:
        """OK saves only what can work: a field that cannot (a server address that is no
        URL, a timeout out of range) is shown, on its tab, with why under it, and the dialog
        stays open. A user who pressed OK expects the settings to work, not a notice at the
        next turn; one who wants to leave has Cancel.

        A server or model that Test connection has just refused is not saved silently
        either: the dialog asks, and what is saved anyway is kept for the next conversation
        (`saved_refused`): the running one is neither changed nor restarted with it."""
        for tab, problems in ((self.speech_tab, self.speech_tab.problems()),
                              (self.llm_tab, self.llm_tab.problems()),
                              (self.tools_tab, self.tools_tab.problems())):
            if problems:
                field, _why = problems[0]
                self.tabs.setCurrentWidget(tab)
                field.setFocus()
                return
        refused = self.refusals()
        if refused and not self._save_anyway(refused):
            page, refused_field, _what, _why = refused[0]
            self.tabs.setCurrentWidget(page)
            refused_field.setFocus()
            return
        self.saved_refused = tuple(what for _tab, _field, what, _why in refused)
        super().accept()

    def refusals(self) -> list[tuple[QWidget, QWidget, str, str]]:
        """What Test connection refused and the form still holds: (tab, field, what, why)."""
        found: list[tuple[QWidget, QWidget, str, str]] = []
        engine = self.engine_box
        why = engine.refused()
        if why is not None:
            found.append((self.speech_tab, engine.url_edit,
                          f"the speech server at {bounded(engine.url_edit.text().strip())}",
                          why))
        why = self.llm_tab.refused()
        if why is not None:
            llm = self.llm_tab.settings()
            model = f"{bounded(llm.model)} at " if llm.model else ""
            found.append((self.llm_tab, self.llm_tab.llm_model_combo,
                          f"the LLM {model}{bounded(llm.host)}", why))
        return found

    def _save_anyway(self, refused: list[tuple[QWidget, QWidget, str, str]]) -> bool:
        """Ask before saving what Test connection refused; True: save it anyway."""
        said = "\n".join(f"• {what}: {why}" for _tab, _field, what, why in refused)
        box = QMessageBox(QMessageBox.Icon.Warning, "Save what the test refused?",
                          f"Test connection refused:\n{said}", parent=self)
        box.setInformativeText(
            "Saved anyway, it is kept for the next conversation you start; a conversation "
            "running now goes on as it is, neither changed nor restarted with it.")
        back = box.addButton("Back to the settings", QMessageBox.ButtonRole.RejectRole)
        box.addButton("Save anyway", QMessageBox.ButtonRole.AcceptRole)
        box.setDefaultButton(back)
        box.exec()
        return box.clickedButton() is not back

    def done(self, result: int) -> None:
        """Every way out (Ok, Cancel, Esc, the close box) stops a running microphone test
        and lets the Tools tab's servers go (a conversation keeps its own)."""
        self.audio_tab.stop_mic_test()
        self.tools_tab.release()
        super().done(result)
