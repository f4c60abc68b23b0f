"""Push-to-talk: while it is on, the microphone stays muted except while a key is held.

The key is F8, held anywhere in the window (a key that types nothing, so it works with the
focus in the text box). Losing the window's focus while holding it mutes again.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtGui import QAction, QKeyEvent
from PySide6.QtWidgets import QApplication, QWidget

PTT_KEY = Qt.Key.Key_F8
PTT_KEY_NAME = "F8"


class PushToTalk(QObject):
    def __init__(self, window: QWidget, mute_action: QAction) -> None:
        super().__init__(window)
        self._mute = mute_action
        self.enabled = False
        self.held = False
        app = QApplication.instance()
        if app is not None:
            app.installEventFilter(self)

    def set_enabled(self, enabled: bool) -> None:
        """On: muted until the key is held. Off: unmuted, as before push-to-talk."""
        self.enabled = enabled
        self.held = False
        self._mute.setChecked(enabled)

    def _ours(self, watched: QObject) -> bool:
        return isinstance(watched, QWidget) and watched.window() is self.parent()

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # Qt's name
        if not self.enabled:
            return False
        kind = event.type()
        if kind == QEvent.Type.ApplicationDeactivate or (
                kind == QEvent.Type.WindowDeactivate and watched is self.parent()):
            self._release()
            return False
        if kind not in (QEvent.Type.KeyPress, QEvent.Type.KeyRelease,
                        QEvent.Type.ShortcutOverride):
            return False
        if not isinstance(event, QKeyEvent) or event.key() != PTT_KEY or not self._ours(watched):
            return False
        if kind == QEvent.Type.ShortcutOverride:
            return False
        if event.isAutoRepeat():
            return True
        if kind == QEvent.Type.KeyPress:
            self.held = True
            self._mute.setChecked(False)
        else:
            self._release()
        return True

    def _release(self) -> None:
        if self.held:
            self.held = False
            self._mute.setChecked(True)
