"""The main window: start/stop, mute, meters, the transcript, the text box, the status bar.

It only draws: everything it learns comes from the controller's signals, and everything
it asks for (start, stop, send, read) returns at once.
"""

from __future__ import annotations

import time
from pathlib import Path

from PySide6.QtCore import QSize, Qt, Signal, Slot
from PySide6.QtGui import (
    QAction,
    QCloseEvent,
    QDragEnterEvent,
    QDropEvent,
    QKeySequence,
    QResizeEvent,
)
from PySide6.QtWidgets import (
    QLabel,
    QMainWindow,
    QMessageBox,
    QToolBar,
    QVBoxLayout,
    QWidget,
)

from app.conversation.session import SessionStatus
from app.display_text import visible_controls
from app.settings.schema import AppSettings
from app.ui.consent_prompt import ConsentPrompt
from app.ui.conversation_controller import ConversationController
from app.ui.dock_share import DockShare
from app.ui.input_box import InputBox
from app.ui.level_meter import LevelMeter
from app.ui.restart_banner import RestartBanner
from app.ui.screen_fit import fit_to_screen
from app.ui.status_line import StatusLine
from app.ui.transcript_panel import TranscriptPanel
from app.ui.window_features import WindowFeatures

DEFAULT_SIZE = QSize(980, 700)  # where the screen has room for it
MAX_DROP_BYTES = 2_000_000  # larger files are refused with a message (read the first part?)


class MainWindow(QMainWindow):
    settings_requested = Signal()
    settings_changed = Signal(object)  # AppSettings
    cancel_turn_requested = Signal()  # the Cancel button of the transcript's pending request

    def __init__(self, controller: ConversationController, settings: AppSettings,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.controller = controller
        self._settings = settings
        # Whether the conversation being started or run got as far as running: an error
        # before that is one that could not start, not one that stopped.
        self._conversation_ran = False
        self.setWindowTitle("ContextSpan")
        fit_to_screen(self, DEFAULT_SIZE)  # a remembered geometry replaces it (features)
        self.setAcceptDrops(True)

        toolbar = QToolBar("Conversation", self)
        toolbar.setMovable(False)
        self.addToolBar(toolbar)
        self.toolbar = toolbar
        self.start_action = QAction("&Start", self)
        self.start_action.setShortcut(QKeySequence("Ctrl+Return"))
        # While paused (a device problem) the main button resumes: this one still stops.
        self.stop_action = QAction("En&d the conversation", self)
        self.stop_action.setShortcut(QKeySequence("Ctrl+Shift+Return"))
        self.stop_action.setToolTip("Stop the conversation (Ctrl+Shift+Enter)")
        self.stop_action.setVisible(False)
        self.mute_action = QAction("Mute mic", self)
        self.mute_action.setCheckable(True)
        self.settings_action = QAction("Settings…", self)
        self.export_action = QAction("Export…", self)
        self.copy_action = QAction("Copy transcript", self)
        for action in (self.start_action, self.stop_action, self.mute_action):
            toolbar.addAction(action)
        self.mic_meter = LevelMeter("mic", self)
        self.speaker_meter = LevelMeter("speaker", self)
        toolbar.addWidget(self.mic_meter)
        toolbar.addWidget(self.speaker_meter)
        toolbar.addSeparator()
        for action in (self.copy_action, self.export_action, self.settings_action):
            toolbar.addAction(action)

        self.banner = QLabel(self)
        self.banner.setWordWrap(True)
        self.banner.setMinimumWidth(1)  # a long word (an error's class) must not widen the window
        self.banner.setStyleSheet("background: #fdecea; color: #611a15; padding: 6px;")
        self.banner.hide()
        self.restart_banner = RestartBanner(self)  # settings that wait for a new conversation
        self.consent_prompt = ConsentPrompt(parent=self)  # a tool that changes things asks
        self.transcript = TranscriptPanel(self)
        self.input_box = InputBox(self)
        central = QWidget(self)
        layout = QVBoxLayout(central)
        layout.addWidget(self.banner)
        layout.addWidget(self.restart_banner)
        layout.addWidget(self.consent_prompt)
        layout.addWidget(self.transcript, 1)
        layout.addWidget(self.input_box)
        self.setCentralWidget(central)
        self.status_line = StatusLine(self)
        self.setStatusBar(self.status_line)
        self.settings = settings  # the status line names its LLM

        self.start_action.triggered.connect(self._toggle)
        self.stop_action.triggered.connect(controller.stop)
        self.mute_action.toggled.connect(controller.set_muted)
        self.settings_action.triggered.connect(self.settings_requested)
        self.export_action.triggered.connect(self._export)
        self.copy_action.triggered.connect(self.transcript.copy_all)
        self.input_box.send_requested.connect(self._send)
        self.input_box.read_requested.connect(self._read)
        controller.status.connect(self._show_status)
        controller.state_changed.connect(self._show_state)
        self.cancel_request_action = QAction("Cancel the LLM request", self)
        self.cancel_request_action.setShortcut(QKeySequence(Qt.Key.Key_Escape))
        self.cancel_request_action.triggered.connect(controller.cancel_pending_turn)
        self.cancel_turn_requested.connect(controller.cancel_pending_turn)  # the entry's button
        self.addAction(self.cancel_request_action)  # Esc anywhere in the window
        self.restart_banner.restart_requested.connect(self._restart)
        controller.state_changed.connect(self.restart_banner.on_state)
        self.closed_at: float | None = None  # monotonic time the user closed the window
        # Menus, conversations (entries reach the transcript through it), what the model
        # knows, find, zoom, push-to-talk, geometry, About.
        self.features = WindowFeatures(self)
        # The side panels narrow before the transcript does (it keeps half the width).
        self.dock_share = DockShare(self, self.transcript,
                                    (self.features.context_dock, self.features.list_dock))

    @property
    def settings(self) -> AppSettings:
        """The settings the next conversation starts with (the app saves what is set)."""
        return self._settings

    @settings.setter
    def settings(self, settings: AppSettings) -> None:
        self._settings = settings
        llm = settings.llm
        self.status_line.set_llm_choice(llm.backend, llm.model, llm.host)

    def resizeEvent(self, event: QResizeEvent) -> None:  # Qt's name
        super().resizeEvent(event)
        self._fit_toolbar()

    def _fit_toolbar(self) -> None:
        """On a narrow window the level meters narrow first, so that no button is pushed
        into the toolbar's » menu while the meters could give room."""
        meters = (self.mic_meter, self.speaker_meter)
        toolbar = self.toolbar
        layout = toolbar.layout()
        spacing = layout.spacing() if layout is not None else 0
        margins = layout.contentsMargins() if layout is not None else toolbar.contentsMargins()
        used = margins.left() + margins.right() + 2  # (rounding)
        for action in toolbar.actions():
            widget = toolbar.widgetForAction(action)
            if widget is not None and action.isVisible():
                used += widget.sizeHint().width() + spacing
        bars = sum(meter.bar_width() for meter in meters)
        spare = self.width() - (used - bars)  # what the bars may take
        for meter in meters:
            meter.set_bar_width(spare // len(meters))

    # ---- drawing ----------------------------------------------------------------------

    # Slots receive signals emitted on the session's thread. The @Slot declarations matter:
    # PySide can crash delivering a cross-thread signal to an undecorated method.
    @Slot(str, str)
    def _show_state(self, state: str, detail: str) -> None:
        shown, tip = detail, ""
        if state == "error":  # the banner says why, once; the status bar only that it did
            shown = "Stopped after an error" if self._conversation_ran else "Could not start"
            tip = f"{shown}: {visible_controls(detail)}"
        self.status_line.show_state(shown, busy=state in ("loading", "stopping"), tip=tip)
        running = state in ("loading", "running")
        self.start_action.setText("&Stop" if running else "&Resume" if state == "paused"
                                  else "&Start")
        self.start_action.setEnabled(state != "stopping")
        self.stop_action.setVisible(state == "paused")
        if state in ("running", "paused"):
            self._conversation_ran = True
        if state == "error":
            what = "stopped" if self._conversation_ran else "could not start"
            self.show_error(f"The conversation {what}: {detail}")
        if state in ("error", "stopped", "model_missing"):
            self._conversation_ran = False  # the next Start begins anew
        elif state in ("loading", "running"):
            self.banner.hide()

    @Slot(object)
    def _show_status(self, status: SessionStatus) -> None:
        self.status_line.show_status(status)
        self.mic_meter.set_level(status.mic_db)
        self.speaker_meter.set_level(status.speaker_db)

    def _restart(self) -> None:
        self.controller.restart(self.settings)

    def show_error(self, message: str) -> None:
        """A clear message in the window (never a crash, never a modal for every hiccup);
        a file name's bidi controls in it are drawn, not obeyed."""
        self.banner.setText(visible_controls(message))
        self.banner.show()

    # ---- user actions -----------------------------------------------------------------

    def _toggle(self) -> None:
        if self.controller.state in ("loading", "running"):
            self.controller.stop()
        else:
            self.controller.start(self.settings)

    def _send(self, text: str) -> None:
        if self.controller.send_text(text):
            self.input_box.clear()

    def _read(self, text: str) -> None:
        if self.controller.inject_text(text, "pasted text"):
            self.input_box.clear()

    def _export(self) -> None:
        self.features.export_current()  # Documents, then the last folder; with a header

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:  # Qt's name
        mime = event.mimeData()
        if mime.hasUrls() or mime.hasText():
            event.acceptProposedAction()

    def dropEvent(self, event: QDropEvent) -> None:  # Qt's name
        mime = event.mimeData()
        if mime.hasUrls():
            for url in mime.urls():
                if url.isLocalFile():
                    self.read_file(Path(url.toLocalFile()))
        elif mime.hasText():
            self._read(mime.text())
        event.acceptProposedAction()

    def read_file(self, path: Path) -> None:
        """A dropped text file is read as a span ("read this")."""
        try:
            if path.stat().st_size > MAX_DROP_BYTES:
                self.controller.notice(f"{path.name} is larger than 2 MB: drop a smaller "
                                       "text file, or paste the part that matters.")
                return
            data = path.read_bytes()
        except OSError as exc:
            self.controller.notice(f"Could not read {path.name}: {exc.strerror or exc}")
            return
        if b"\0" in data[:8192]:
            self.controller.notice(f"{path.name} is not a text file.")
            return
        self.controller.inject_text(data.decode("utf-8", errors="replace"),
                                    f"dropped file: {path.name}")

    def has_unsaved(self) -> bool:
        """Whether closing now would lose something. The conversation is autosaved: this
        writes what is pending first, so it is True only when that write failed."""
        return self.features.keeper.has_unsaved()

    def closeEvent(self, event: QCloseEvent) -> None:  # Qt's name
        """Closes at once: the conversation winds down on its own threads (the app waits for
        them, bounded, after the window is gone)."""
        if self.has_unsaved() and QMessageBox.question(
                self, "Close ContextSpan?", "The conversation is not saved. Close anyway?"
        ) != QMessageBox.StandardButton.Yes:
            event.ignore()
            return
        self.closed_at = time.monotonic()
        self.consent_prompt.detach()  # questions still waiting are refused, not left hanging
        self.controller.begin_shutdown()
        self.features.close_viewers()  # Quit quits: no window of the app stays open
        event.accept()
