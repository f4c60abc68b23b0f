"""The main window as its features know it (window_features.py, tray.py): the conversation
controls main_window.MainWindow makes before its features, which read and connect to them. A
base class, not a Protocol: the features give the window to Qt as their parent widget."""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import Signal
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QMainWindow

if TYPE_CHECKING:
    from app.settings.schema import AppSettings
    from app.ui.conversation_controller import ConversationController
    from app.ui.input_box import InputBox
    from app.ui.level_meter import LevelMeter
    from app.ui.status_line import StatusLine
    from app.ui.transcript_panel import TranscriptPanel


class FurnishedWindow(QMainWindow):
    """The window the features furnish, as they know it (main_window.MainWindow is it): its
    conversation controls, made before the features, which read and connect to them."""

    cancel_turn_requested = Signal()  # the Cancel button of the transcript's pending request

    controller: ConversationController
    transcript: TranscriptPanel
    input_box: InputBox
    status_line: StatusLine
    mic_meter: LevelMeter
    speaker_meter: LevelMeter
    start_action: QAction
    stop_action: QAction
    mute_action: QAction
    settings_action: QAction
    export_action: QAction
    copy_action: QAction
    cancel_request_action: QAction

    @property
    def settings(self) -> AppSettings:
        """The settings the next conversation starts with."""
        raise NotImplementedError

    def show_error(self, message: str) -> None:
        raise NotImplementedError
