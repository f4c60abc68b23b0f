"""What the window remembers between launches that is not a setting: its geometry and docks,
the last export folder, the text size, push-to-talk, desktop notifications. It churns
(every move of the window), so it lives in its own small file beside settings.json and
stays out of the settings schema.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QByteArray, QSettings, QStandardPaths

from app.settings.store import config_dir

STATE_FILE = "window-state.ini"


def documents_dir() -> Path:
    """The user's Documents folder (home when the desktop has none). Qt names
    `~/Documents` whether or not it exists, and its file dialog opens a missing folder as
    the working directory: only a folder that is there is given."""
    found = QStandardPaths.writableLocation(QStandardPaths.StandardLocation.DocumentsLocation)
    if found and Path(found).is_dir():
        return Path(found)
    return Path.home()


class UiState:
    def __init__(self, path: Path | None = None) -> None:
        self.path = Path(path) if path is not None else config_dir() / STATE_FILE
        self._settings = QSettings(str(self.path), QSettings.Format.IniFormat)

    def _bytes(self, key: str) -> QByteArray | None:
        value = self._settings.value(key)
        return value if isinstance(value, QByteArray) and not value.isEmpty() else None

    @property
    def geometry(self) -> QByteArray | None:
        return self._bytes("window/geometry")

    @property
    def window_state(self) -> QByteArray | None:
        return self._bytes("window/state")

    def save_window(self, geometry: QByteArray, state: QByteArray) -> None:
        self._settings.setValue("window/geometry", geometry)
        self._settings.setValue("window/state", state)
        self._settings.sync()

    @property
    def export_dir(self) -> Path:
        """The folder of the last export, else Documents."""
        value = self._settings.value("export/folder")
        if isinstance(value, str) and value and Path(value).is_dir():
            return Path(value)
        return documents_dir()

    @export_dir.setter
    def export_dir(self, folder: Path) -> None:
        self._settings.setValue("export/folder", str(folder))
        self._settings.sync()

    def _int(self, key: str, default: int) -> int:
        value = self._settings.value(key, default)  # an int, a str from the file, or junk
        if not isinstance(value, (int, float, str, bytes)):
            return default
        try:
            return int(value)
        except (TypeError, ValueError):
            return default

    @property
    def zoom(self) -> int:
        return self._int("transcript/zoom", 0)

    @zoom.setter
    def zoom(self, zoom: int) -> None:
        self._settings.setValue("transcript/zoom", int(zoom))

    @property
    def push_to_talk(self) -> bool:
        return self._int("audio/push_to_talk", 0) == 1

    @push_to_talk.setter
    def push_to_talk(self, enabled: bool) -> None:
        self._settings.setValue("audio/push_to_talk", 1 if enabled else 0)

    @property
    def notifications(self) -> bool:
        """Desktop notifications while the window is not active (tray.py); on unless
        turned off."""
        return self._int("window/notifications", 1) == 1

    @notifications.setter
    def notifications(self, enabled: bool) -> None:
        self._settings.setValue("window/notifications", 1 if enabled else 0)

    def sync(self) -> None:
        self._settings.sync()
