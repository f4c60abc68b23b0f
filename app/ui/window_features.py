"""What the main window offers beyond its conversation controls: the menus and their
shortcuts, conversations (autosaved, listed, reopened read-only), what the model knows now,
find and zoom, push-to-talk, the tray icon and notifications (tray.py), the window's
remembered geometry, Help (the docs, how to get an LLM, About); and what the window shows
when a conversation stops or the microphone is muted.

Kept apart from `main_window.py` so the window itself stays a small list of its parts. The
features know the window as a `FurnishedWindow`, declared here: a main window with the parts
they read and connect to (main_window.py's MainWindow is one).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, cast

import shiboken6
from PySide6.QtCore import QEvent, QObject, Qt, Slot
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (
    QApplication,
    QBoxLayout,
    QDockWidget,
    QMenu,
    QMessageBox,
    QToolBar,
    QToolButton,
    QWidget,
)

from app.conversation.session import SessionStatus
from app.conversation.transcript.entries import TranscriptEntry
from app.conversation.transcript.saved import ConversationStore, title_for
from app.ui.about_dialog import about_box
from app.ui.background_jobs import BackgroundJobs
from app.ui.context_panel import ContextPanel
from app.ui.conversation_keeper import ConversationKeeper, describe_llm
from app.ui.conversation_list import ConversationList, started_label
from app.ui.export_dialog import export_with_dialog
from app.ui.furnished_window import FurnishedWindow
from app.ui.help_window import GETTING_AN_LLM, HelpWindow
from app.ui.push_to_talk import PTT_KEY_NAME, PushToTalk
from app.ui.saved_conversation_window import SavedConversationWindow
from app.ui.screen_fit import fit_when_shown
from app.ui.search_bar import SearchBar
from app.ui.tray import DesktopTray
from app.ui.ui_state import UiState

if TYPE_CHECKING:
    from app.settings.schema import AppSettings

RUNNING_STATES = ("loading", "running", "paused")
ENDED_STATES = ("stopped", "error", "model_missing", "idle")
MUTE_TEXT = ("&Mute mic", "Un&mute mic")  # (not muted, muted)


def _action(window: QWidget, text: str, shortcut: QKeySequence | str | None,
            slot: Callable[[], object] | None = None, checkable: bool = False) -> QAction:
    action = QAction(text, window)
    if shortcut is not None:
        action.setShortcut(QKeySequence(shortcut))
    action.setCheckable(checkable)
    if slot is not None:
        action.triggered.connect(slot)
    return action


def _settings_of(window: weakref.ref[FurnishedWindow]) -> AppSettings:
    alive = window()
    assert alive is not None, "asked after its window was freed"
    return alive.settings


class WindowFeatures(QObject):
    def __init__(self, window: FurnishedWindow, state: UiState | None = None,
                 store: ConversationStore | None = None) -> None:
        super().__init__(window)
        self.state = state or UiState()
        controller = window.controller
        panel = window.transcript
        # The window's settings, asked through a weak reference: holding the window here
        # (the window holds its features) would make the window cyclic garbage, freed by
        # the collector instead of when it closes.
        self.keeper = ConversationKeeper(panel, store or ConversationStore(),
                                         partial(_settings_of, weakref.ref(window)), self)
        self.context_panel = ContextPanel(panel.model, window)
        self.conversation_list = ConversationList(window)
        self.search_bar = SearchBar(panel, window)
        self.push_to_talk = PushToTalk(window, window.mute_action)
        self.viewers: list[SavedConversationWindow] = []
        self._help: Callable[[], HelpWindow | None] = lambda: None  # the open help window
        self._list_jobs = BackgroundJobs({"list": self._show_saved_list}, parent=self)

        central = window.centralWidget()
        layout = central.layout() if central is not None else None
        assert isinstance(layout, QBoxLayout)  # main_window.py lays its parts in a column
        layout.insertWidget(layout.indexOf(window.input_box), self.search_bar)
        self.context_dock = self._dock("What the model knows", "context-dock",
                                       self.context_panel, Qt.DockWidgetArea.RightDockWidgetArea)
        self.list_dock = self._dock("Conversations", "conversations-dock",
                                    self.conversation_list,
                                    Qt.DockWidgetArea.LeftDockWidgetArea)
        self.list_dock.hide()
        self._make_actions()
        self._make_menus()
        self._keyboard()
        # The tray icon where the desktop has one, and notifications while away.
        self.tray = DesktopTray(window, self.notify_action, self.quit_action)

        controller.entry.connect(self.keeper.on_entry)
        controller.entry_sinks.append(self.keeper.from_session)  # autosave: no GUI wait
        window.input_box.editor.textChanged.connect(self._note_draft)
        controller.state_changed.connect(self._on_state)
        controller.status.connect(self._on_status)
        panel.cancel_requested.connect(self._cancel_turn)
        panel.resend_requested.connect(self.send_again)
        self.context_panel.resend_requested.connect(self.send_again)
        panel.zoomChanged.connect(self._remember_zoom)
        window.mute_action.toggled.connect(self._show_muted)
        self.keeper.listChanged.connect(self.refresh_list)
        self.keeper.saveFailed.connect(self._save_failed)
        self.conversation_list.new_requested.connect(self.new_conversation)
        self.conversation_list.open_requested.connect(self.open_saved)
        self.conversation_list.delete_requested.connect(self.delete_saved)

        panel.set_zoom(self.state.zoom)
        if self.state.push_to_talk:
            self.push_to_talk_action.setChecked(True)
        self._restore_geometry()
        window.installEventFilter(self)
        app = QApplication.instance()
        if app is not None:
            app.aboutToQuit.connect(self._on_quit)
        self._show_muted(window.mute_action.isChecked())
        self._set_meters_active(False)
        self.refresh_list()
        self._restore_draft()

    # ---- building ---------------------------------------------------------------------------

    def _dock(self, title: str, name: str, widget: QWidget,
              area: Qt.DockWidgetArea) -> QDockWidget:
        dock = QDockWidget(title, self.window)
        dock.setObjectName(name)  # saveState/restoreState find docks by name
        dock.setWidget(widget)
        dock.setFeatures(QDockWidget.DockWidgetFeature.DockWidgetClosable
                         | QDockWidget.DockWidgetFeature.DockWidgetMovable)
        self.window.addDockWidget(area, dock)
        return dock

    def _make_actions(self) -> None:
        w = self.window
        w.start_action.setToolTip("Start or stop the conversation (Ctrl+Enter)")
        w.cancel_request_action.setText("Cance&l the LLM request")
        w.mute_action.setShortcut(QKeySequence("Ctrl+M"))
        w.mute_action.setToolTip("Mute or unmute the microphone (Ctrl+M)")
        w.settings_action.setText("Se&ttings…")
        w.settings_action.setShortcut(QKeySequence("Ctrl+,"))
        w.export_action.setText("&Export…")
        w.export_action.setShortcut(QKeySequence("Ctrl+E"))
        w.copy_action.setText("&Copy transcript")
        w.copy_action.setShortcut(QKeySequence("Ctrl+Shift+C"))
        self.push_to_talk_action: QAction = _action(w, f"&Push to talk (hold {PTT_KEY_NAME})",
                                           "Ctrl+Shift+M", checkable=True)
        self.push_to_talk_action.toggled.connect(self._set_push_to_talk)
        self.new_action = _action(w, "&New conversation", "Ctrl+N", self.new_conversation)
        self.list_action = _action(w, "C&onversations…", "Ctrl+O", self.show_list)
        self.quit_action: QAction = _action(w, "&Quit", "Ctrl+Q", w.close)
        self.find_action = _action(w, "&Find…", "Ctrl+F", self.search_bar.open_bar)
        self.zoom_in_action = _action(w, "Zoom &in", "Ctrl++", w.transcript.zoom_in)
        self.zoom_in_action.setShortcuts([QKeySequence("Ctrl++"), QKeySequence("Ctrl+=")])
        self.zoom_out_action = _action(w, "Zoom &out", "Ctrl+-", w.transcript.zoom_out)
        self.zoom_reset_action = _action(w, "&Actual size", "Ctrl+0", self._actual_size)
        self.focus_input_action = _action(w, "&Type a message", "Ctrl+L", self.focus_input)
        self.help_action = _action(w, "ContextSpan &help", "F1", self.show_help)
        self.llm_help_action = _action(w, "Get an &LLM (Ollama)…", "Shift+F1",
                                       self.show_llm_help)
        self.llm_help_action.setToolTip("How to install Ollama and a model, and choose it "
                                        "in Settings → Assistant (LLM)")
        self.about_action = _action(w, "&About ContextSpan", "Ctrl+F1", self.show_about)
        self.context_action = self.context_dock.toggleViewAction()
        self.context_action.setText("What the model &knows")
        self.context_action.setShortcut(QKeySequence("Ctrl+K"))
        self.list_dock_action = self.list_dock.toggleViewAction()
        self.list_dock_action.setText("&Conversation list")
        self.list_dock_action.setShortcut(QKeySequence("Ctrl+Shift+L"))
        self.notify_action: QAction = _action(w, "Desktop &notifications", "Ctrl+Shift+N",
                                              checkable=True)
        self.notify_action.setToolTip("While the window is not in front: say when the "
                                      "assistant answered, or an error stopped the "
                                      "conversation")
        self.notify_action.setChecked(self.state.notifications)
        self.notify_action.toggled.connect(self._remember_notifications)

    def _make_menus(self) -> None:
        w = self.window
        bar = w.menuBar()
        conversation = QMenu("&Conversation", w)
        for item in (w.start_action, w.stop_action, w.cancel_request_action, self.new_action, None,
                     w.mute_action,
                     self.push_to_talk_action, None, self.list_action, w.export_action,
                     w.copy_action, None, w.settings_action, None, self.quit_action):
            conversation.addSeparator() if item is None else conversation.addAction(item)
        view = QMenu("&View", w)
        for item in (self.find_action, self.focus_input_action, None, self.zoom_in_action,
                     self.zoom_out_action, self.zoom_reset_action, None, self.context_action,
                     self.list_dock_action, None, self.notify_action):
            view.addSeparator() if item is None else view.addAction(item)
        help_menu = QMenu("&Help", w)
        for item in (self.help_action, self.llm_help_action, None, self.about_action):
            help_menu.addSeparator() if item is None else help_menu.addAction(item)
        for menu in (conversation, view, help_menu):
            bar.addMenu(menu)
        self.menus = (conversation, view, help_menu)
        for action in (self.new_action, self.find_action, self.zoom_in_action,
                       self.zoom_out_action, self.zoom_reset_action, self.focus_input_action,
                       self.help_action, self.llm_help_action, self.about_action,
                       self.push_to_talk_action, self.quit_action,
                       self.list_action):
            w.addAction(action)  # shortcuts work while the menu bar is hidden, too

    def _keyboard(self) -> None:
        """Toolbar buttons take the focus with Tab; the order runs top to bottom."""
        w = self.window
        chain: list[QWidget] = []
        for toolbar in w.findChildren(QToolBar):
            if not toolbar.objectName():
                toolbar.setObjectName(f"toolbar-{toolbar.windowTitle().lower()}")  # saveState
            for action in toolbar.actions():
                button = toolbar.widgetForAction(action)
                if isinstance(button, QToolButton):
                    button.setFocusPolicy(Qt.FocusPolicy.TabFocus)
                    chain.append(button)
        box = w.input_box
        chain += [w.transcript.view, self.search_bar.field, box.editor, box.send_button,
                  box.read_button, self.context_panel.list, self.conversation_list.list]
        for first, second in zip(chain, chain[1:], strict=False):
            QWidget.setTabOrder(first, second)

    # ---- conversations ----------------------------------------------------------------------

    @Slot()
    def refresh_list(self) -> None:
        """Read the saved conversations off the GUI thread (a long history is many files);
        the list shows them when they are read, the newest reading winning."""
        self._list_jobs.start("list", self.keeper.store.list)

    def _show_saved_list(self, saved: object) -> None:
        if isinstance(saved, Exception):  # store.list skips what it cannot read: a bug
            self.window.show_error(f"Could not list the saved conversations: {saved}")
            return
        assert isinstance(saved, list)
        entries = self.window.transcript.entries()
        self.conversation_list.show_conversations(
            self.keeper.conversation_id, title_for(entries) if entries else "New conversation",
            saved)

    def show_list(self) -> None:
        self.list_dock.show()
        self.list_dock.raise_()
        self.refresh_list()
        self.conversation_list.list.setFocus(Qt.FocusReason.ShortcutFocusReason)

    def new_conversation(self) -> None:
        """Put this conversation away and start an empty one; a running conversation starts
        again with a fresh model context (the old one's transcript is saved)."""
        self.keeper.new_conversation()
        controller = self.window.controller
        if controller.running:
            controller.restart(self.window.settings)
        self.focus_input()

    def open_saved(self, conversation_id: str) -> SavedConversationWindow | None:
        try:
            header, entries = self.keeper.store.load(conversation_id)
        except (OSError, ValueError) as exc:
            self.window.show_error(f"Could not open that conversation: {exc}")
            self.refresh_list()
            return None
        viewer = SavedConversationWindow(header, entries, self.state, None)
        # Its id, not the viewer: a slot holding the viewer would keep it alive (a cycle).
        viewer.destroyed.connect(partial(self._forget_viewer, id(viewer)))
        self.viewers.append(viewer)
        viewer.show()
        return viewer

    @property
    def window(self) -> FurnishedWindow:
        """The window these features belong to (their parent: no reference of ours)."""
        return cast(FurnishedWindow, self.parent())

    def _actual_size(self, *_checked: object) -> None:
        self.window.transcript.set_zoom(0)

    def _forget_viewer(self, viewer_id: int, *_destroyed: object) -> None:
        self.viewers = [v for v in self.viewers if id(v) != viewer_id]

    def _note_draft(self) -> None:
        self.keeper.note_draft(self.window.input_box.editor.toPlainText())

    @Slot(object)
    def send_again(self, entry: TranscriptEntry) -> bool:
        """A span the model lost (a dropped connection, a restart) read to it again, as it
        was read the first time (False, and a notice, when no conversation runs)."""
        return self.window.controller.inject_text(entry.text, entry.source or "sent again")

    def _cancel_turn(self, _entry: object) -> None:
        self.window.cancel_turn_requested.emit()

    def _save_failed(self, error: str) -> None:
        self.window.show_error(f"The conversation could not be saved: {error}")

    def _restore_draft(self) -> None:
        """What the user typed and never sent, last time (a close, a Quit, a crash): back in
        the box, and said, so it is not mistaken for something new."""
        draft = self.keeper.restore_draft()
        if draft:
            self.window.input_box.editor.setPlainText(draft)
            self.window.controller.notice("The text you had not sent when ContextSpan last "
                                          "closed is back in the box below.", "info")

    def close_viewers(self) -> None:
        """The main window closed: the saved conversations' windows go with it, or the app
        would go on running for a read-only window."""
        for viewer in list(self.viewers):
            viewer.close()

    def delete_saved(self, conversation_id: str, confirm: bool = True) -> None:
        if confirm and QMessageBox.question(
                self.window, "Delete the conversation?",
                f"{self._name_of(conversation_id)}: its saved transcript will be deleted from "
                "this computer.",
        ) != QMessageBox.StandardButton.Yes:
            return
        try:
            self.keeper.delete(conversation_id)
        except (OSError, ValueError) as exc:
            self.window.show_error(f"Could not delete that conversation: {exc}")

    def _name_of(self, conversation_id: str) -> str:
        """A saved conversation as the list shows it: “its title” and when it started (one
        file, already read by the list unless it changed since)."""
        try:
            summary = self.keeper.store.summary(conversation_id)
        except ValueError:  # not an id the store could have written
            summary = None
        if summary is None:
            return "This conversation"
        return f"“{summary.title}” ({started_label(summary.started)})"

    def export_current(self) -> None:
        export_with_dialog(self.window, self.window.transcript.entries(), self.keeper.header(),
                           self.state)

    # ---- what the window shows ----------------------------------------------------------------

    @Slot(str, str)
    def _on_state(self, state: str, _detail: str) -> None:
        if state == "loading":
            self.keeper.note_started()
        if state in RUNNING_STATES:
            self._set_meters_active(True)
        elif state in ENDED_STATES:
            self.keeper.close_open()
            self.context_panel.forget_all()
            self.window.status_line.clear_figures()
            self._set_meters_active(False)

    @Slot(object)
    def _on_status(self, status: SessionStatus) -> None:
        self.keeper.note_status(status)

    def _set_meters_active(self, active: bool) -> None:
        for meter in (self.window.mic_meter, self.window.speaker_meter):
            meter.set_active(active)

    @Slot(bool)
    def _show_muted(self, muted: bool) -> None:
        action = self.window.mute_action
        action.setText(MUTE_TEXT[1] if muted else MUTE_TEXT[0])
        self.window.mic_meter.set_muted(muted)

    def _set_push_to_talk(self, enabled: bool) -> None:
        self.push_to_talk.set_enabled(enabled)
        self.state.push_to_talk = enabled
        self.window.input_box.editor.setPlaceholderText(
            (f"Hold {PTT_KEY_NAME} to talk. " if enabled else "")
            + "Type to the assistant (Enter sends) — or paste a text and press “Read this”")

    def _remember_notifications(self, enabled: bool) -> None:
        self.state.notifications = enabled

    def _remember_zoom(self, zoom: int) -> None:
        self.state.zoom = zoom

    def focus_input(self) -> None:
        self.window.input_box.editor.setFocus(Qt.FocusReason.ShortcutFocusReason)

    def show_help(self, page: Path | None = None) -> HelpWindow:
        """Help → ContextSpan help: the docs in a window of their own (one at a time)."""
        shown = self._help()
        if shown is not None and shiboken6.isValid(shown):
            if page is not None:
                shown.show_page(page)
            shown.raise_()
            shown.activateWindow()
            return shown
        viewer = HelpWindow(self.window, page)
        self._help = weakref.ref(viewer)  # it dies when closed (WA_DeleteOnClose)
        viewer.show()
        return viewer

    def show_llm_help(self) -> HelpWindow:
        """Help → Get an LLM: how to install Ollama and a model."""
        return self.show_help(GETTING_AN_LLM)

    def show_about(self) -> QMessageBox:
        from app.checkpoints.catalog import CatalogError, get_manifest

        settings = self.window.settings
        try:
            model = get_manifest(settings.speech.model_id).display_name
        except (CatalogError, ValueError):
            model = settings.speech.model_id
        status = self.window.status_line.last_status
        device = (f"{status.device} ({status.dtype})" if status is not None
                  else f"{settings.speech.device} (chosen in Settings)")
        return about_box(self.window, model, device, describe_llm(settings))

    # ---- remembered geometry ------------------------------------------------------------------

    def _restore_geometry(self) -> None:
        """The window as it was left, brought back inside the screen where that no longer
        fits it (a smaller screen, a larger scale), and kept there each time it is shown."""
        if self.state.geometry is not None:
            self.window.restoreGeometry(self.state.geometry)
        if self.state.window_state is not None:
            self.window.restoreState(self.state.window_state)
        fit_when_shown(self.window, self.window.size())

    def save_geometry(self) -> None:
        self.state.save_window(self.window.saveGeometry(), self.window.saveState())

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # Qt's name
        if watched is self.window and event.type() == QEvent.Type.Close:
            self.save_geometry()
        return False

    def _on_quit(self) -> None:
        self.keeper.close_open("the app closed")
        self.keeper.shutdown()
        self.state.sync()
