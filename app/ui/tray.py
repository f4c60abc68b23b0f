"""The system tray: the app's icon beside the clock, and desktop notifications for a user
who is away from the window.

Where the desktop has a tray (`QSystemTrayIcon.isSystemTrayAvailable()`), an icon whose menu
shows or hides the window, mutes the microphone (the window's own Mute action, so the two
agree), turns notifications on or off and quits; a click on the icon shows the window, as
does a click on a notification. Where it has none, there is no icon and no error: the
window's menus hold everything.

Notifications say only what a user away from the window needs to know, and only while the
window is not the active one (someone looking at the transcript is not told twice): an error
that stopped the conversation (or kept it from starting), and the assistant's answer
reaching the voice (its first words). View → Desktop notifications turns them off; the
choice is remembered with the window's state (ui_state.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, cast

from PySide6.QtCore import QObject, Signal, Slot
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QApplication, QMenu, QStyle, QSystemTrayIcon

from app.conversation.transcript.entries import TranscriptEntry
from app.display_text import visible_controls

if TYPE_CHECKING:  # the window's features make the tray
    from app.ui.furnished_window import FurnishedWindow

ANSWER_CHARS = 140  # a notification shows the answer's start; the transcript has it whole
ERROR_CHARS = 240


@dataclass(frozen=True)
class Notification:
    title: str
    message: str
    severity: Literal["info", "error"] = "info"


def _shortened(text: str, limit: int) -> str:
    text = " ".join(visible_controls(text).split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _from_the_llm(source: str) -> bool:
    return source == "llm" or source.startswith("llm+")


def state_notification(state: str, detail: str, ran: bool) -> Notification | None:
    """What a user away from the window is told of the conversation's new state: only an
    error, which ends it (`ran`: it had been running, so it stopped, else never started)."""
    if state != "error":
        return None
    what = "stopped" if ran else "could not start"
    return Notification(f"The conversation {what}", _shortened(detail, ERROR_CHARS) or
                        "An error ended it: the window says more.", "error")


def entry_notification(entry: TranscriptEntry) -> Notification | None:
    """The assistant's answer reached the voice: a span of the LLM's that landed."""
    if entry.kind != "span" or not entry.final or entry.landed_frame is None:
        return None
    if not _from_the_llm(entry.source):
        return None
    return Notification("The assistant answered", _shortened(entry.text, ANSWER_CHARS))


class AwayNotifier(QObject):
    """Hears the window's conversation and emits `notification` with what a user away from
    the window needs, while the window is not active and `enabled()` says notifications are
    on. Each answer is told once (its entry is replaced as its details change).

    The window is had as the Qt parent, never held: a reference back to it would make the
    window cyclic garbage, freed by the collector at any time instead of when it closes."""

    notification = Signal(object)  # Notification

    def __init__(self, window: FurnishedWindow, enabled: Callable[[], bool]) -> None:
        super().__init__(window)
        self._enabled = enabled
        self._ran = False  # the conversation got as far as running
        self._told: set[tuple[str, int]] = set()
        window.controller.state_changed.connect(self._on_state)
        window.controller.entry.connect(self._on_entry)

    @property
    def window(self) -> FurnishedWindow:
        return cast("FurnishedWindow", self.parent())

    def _away(self) -> bool:
        return not self.window.isActiveWindow() and self._enabled()

    @Slot(str, str)
    def _on_state(self, state: str, detail: str) -> None:
        notification = state_notification(state, detail, self._ran)
        if state in ("running", "paused"):
            self._ran = True
        elif state in ("error", "stopped", "model_missing"):
            self._ran = False
        if notification is not None and self._away():
            self.notification.emit(notification)

    @Slot(object)
    def _on_entry(self, entry: TranscriptEntry) -> None:
        notification = entry_notification(entry)
        if notification is None or entry.key in self._told:
            return
        self._told.add(entry.key)  # told or not, an answer is not told later
        if self._away():
            self.notification.emit(notification)


class DesktopTray(QObject):
    """The tray icon and its menu where the desktop has a tray; the notifier in any case
    (with no tray it has nowhere to show, and shows nothing)."""

    def __init__(self, window: FurnishedWindow, notify_action: QAction,
                 quit_action: QAction) -> None:
        super().__init__(window)
        self.icon: QSystemTrayIcon | None = None
        self.notifier = AwayNotifier(window, notify_action.isChecked)
        self.notifier.notification.connect(self.show_notification)
        if not QSystemTrayIcon.isSystemTrayAvailable():
            return
        style = window.style()
        icon = QSystemTrayIcon(style.standardIcon(QStyle.StandardPixmap.SP_MediaVolume), self)
        icon.setToolTip("ContextSpan")
        menu = QMenu(window)
        self.show_action = QAction("&Hide window", self)
        self.show_action.triggered.connect(self._show_or_hide)
        menu.addAction(self.show_action)
        menu.addSeparator()
        menu.addAction(window.mute_action)
        menu.addAction(notify_action)
        menu.addSeparator()
        tray_quit = QAction(quit_action.text(), self)
        tray_quit.triggered.connect(self.quit)
        menu.addAction(tray_quit)
        menu.aboutToShow.connect(self._name_show_action)
        icon.setContextMenu(menu)
        icon.activated.connect(self._activated)
        icon.messageClicked.connect(self.show_window)
        app = QApplication.instance()
        if app is not None:
            app.aboutToQuit.connect(icon.hide)  # gone with the app, not after it
        icon.show()
        self.icon = icon

    @property
    def window(self) -> FurnishedWindow:
        return cast("FurnishedWindow", self.parent())

    @Slot(object)
    def show_notification(self, notification: Notification) -> None:
        if self.icon is None:
            return
        kind = (QSystemTrayIcon.MessageIcon.Critical if notification.severity == "error"
                else QSystemTrayIcon.MessageIcon.Information)
        self.icon.showMessage(notification.title, notification.message, kind)

    def _name_show_action(self) -> None:
        self.show_action.setText("&Hide window" if self.window.isVisible()
                                 else "&Show window")

    @Slot(QSystemTrayIcon.ActivationReason)
    def _activated(self, reason: QSystemTrayIcon.ActivationReason) -> None:
        if reason == QSystemTrayIcon.ActivationReason.Trigger:
            self.toggle_window()

    def _show_or_hide(self) -> None:
        """The menu's item: it said Hide while the window was shown."""
        self.hide_window() if self.window.isVisible() else self.show_window()

    def toggle_window(self) -> None:
        """A click on the icon: a window in front goes into the tray, any other comes
        to the front."""
        if self.window.isVisible() and self.window.isActiveWindow():
            self.hide_window()
        else:
            self.show_window()

    def hide_window(self) -> None:
        """Into the tray: the conversation goes on. Closing another window (help) while
        this one is hidden must not quit the app."""
        app = QApplication.instance()
        if isinstance(app, QApplication):
            app.setQuitOnLastWindowClosed(False)
        self.window.hide()

    def show_window(self) -> None:
        app = QApplication.instance()
        if isinstance(app, QApplication):
            app.setQuitOnLastWindowClosed(True)
        self.window.showNormal() if self.window.isMinimized() else self.window.show()
        self.window.raise_()
        self.window.activateWindow()

    def quit(self) -> None:
        """Quit as the window's Quit does (it may ask about an unsaved conversation); a
        window closed while hidden quits the app itself."""
        if self.window.close():
            QApplication.quit()
