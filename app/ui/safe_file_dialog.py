"""File dialogs that never read a file's contents on the GUI thread.

Qt's own (non-native) file dialog names each file's type and icon with `QMimeDatabase`, which
sniffs the contents of a file whose name says nothing; typing a path completes it on the GUI
thread. Typing `/proc/kmsg` therefore blocked the whole app in `read()` (autosave included)
until it was killed. Here the dialog's icon provider works from the file's name and `stat`
only (a FIFO, a device or a `/proc` file is never opened), and a chosen path under `/proc`,
`/sys` or `/dev`, or one that names anything but a regular file, is refused with a message
before anything opens it.

Every file dialog of the app goes through `save_file_name` or `existing_directory`.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from PySide6.QtCore import QFileInfo, QMimeDatabase
from PySide6.QtGui import QAbstractFileIconProvider
from PySide6.QtWidgets import (
    QFileDialog,
    QFileIconProvider,
    QMessageBox,
    QWidget,
)

from app.ui.screen_fit import fit_when_shown

# Filesystems of the kernel's own: their "files" may block a reader forever or have effects.
SPECIAL_ROOTS = (Path("/proc"), Path("/sys"), Path("/dev"))
_DIALOG_OPTIONS = (QFileDialog.Option.DontUseNativeDialog
                   | QFileDialog.Option.DontUseCustomDirectoryIcons)


class NameOnlyIconProvider(QFileIconProvider):
    """Icons and type names from the name and `stat` alone: never opens a file."""

    def __init__(self) -> None:
        super().__init__()
        self._mime = QMimeDatabase()
        self.setOptions(QAbstractFileIconProvider.Option.DontUseCustomDirectoryIcons)

    def icon(self, what):  # (IconType) or (QFileInfo), as Qt's
        if isinstance(what, QFileInfo):
            kind = (QAbstractFileIconProvider.IconType.Folder if what.isDir()
                    else QAbstractFileIconProvider.IconType.File)
            return super().icon(kind)
        return super().icon(what)

    def type(self, info: QFileInfo) -> str:  # Qt's name
        if info.isDir():
            return "Folder"
        if not info.isFile():  # a FIFO, a socket, a device: said, never opened
            return "Special file"
        by_name = self._mime.mimeTypeForFile(info.fileName(),
                                             QMimeDatabase.MatchMode.MatchExtension)
        return by_name.comment() if not by_name.isDefault() else "File"


def _special_root(absolute: Path) -> Path | None:
    """The system folder (/proc, /sys, /dev) `absolute` lies in, if any."""
    return next((root for root in SPECIAL_ROOTS
                 if absolute == root or root in absolute.parents), None)


def special_path_reason(path: Path) -> str | None:
    """Why `path` must not be written or read as a file (None: it may be). Links are
    followed to what they name (a link to /proc/kmsg or to a pipe is refused too); looks
    with `stat` only, never opens it."""
    absolute = Path(os.path.realpath(path))
    root = _special_root(absolute)
    if root is not None:
        return f"{absolute} is inside {root}, the system's own files"
    try:
        mode = os.stat(absolute).st_mode
    except FileNotFoundError:
        return None  # a new file
    except OSError as exc:
        return f"{absolute} cannot be looked at ({exc.strerror or exc})"
    if stat.S_ISDIR(mode):
        return f"{absolute} is a folder"
    if not stat.S_ISREG(mode):
        return f"{absolute} is not a regular file (a pipe, a socket or a device)"
    return None


@contextlib.contextmanager
def _dialog(parent: QWidget | None, caption: str, start: str) -> Iterator[QFileDialog]:
    """Our file dialog, deleted (on the GUI thread) once the question is answered."""
    dialog = QFileDialog(parent, caption, start)
    dialog.setOptions(_DIALOG_OPTIONS)
    fit_when_shown(dialog)  # Qt's own size for it may exceed a small or scaled screen
    dialog.setIconProvider(NameOnlyIconProvider())
    try:
        yield dialog
    finally:
        dialog.deleteLater()


def save_file_name(parent: QWidget | None, caption: str, start: str,
                   filters: str) -> tuple[str, str]:
    """QFileDialog.getSaveFileName's answer, ("", "") when cancelled; a special path is
    refused with a message and the dialog asked again."""
    start_path = Path(start)
    with _dialog(parent, caption, str(start_path.parent)) as dialog:
        dialog.setAcceptMode(QFileDialog.AcceptMode.AcceptSave)
        dialog.setFileMode(QFileDialog.FileMode.AnyFile)
        # Asked here, after the special-file check: Qt would offer to "replace" a FIFO.
        dialog.setOption(QFileDialog.Option.DontConfirmOverwrite, True)
        dialog.setNameFilters(filters.split(";;"))
        dialog.selectFile(start_path.name)
        while dialog.exec():
            chosen = dialog.selectedFiles()
            if not chosen:
                return "", ""
            target = Path(chosen[0])
            reason = special_path_reason(target)
            if reason is not None:
                QMessageBox.warning(parent, caption, f"Choose another file: {reason}.")
                continue
            if target.exists() and QMessageBox.question(
                    parent, caption, f"{target.name} already exists. Replace it?"
            ) != QMessageBox.StandardButton.Yes:
                continue
            return str(target), dialog.selectedNameFilter()
        return "", ""


def existing_directory(parent: QWidget | None, caption: str, start: str = "") -> str:
    """Ask for a folder: its path, or "" when cancelled (special folders refused)."""
    with _dialog(parent, caption, start) as dialog:
        dialog.setFileMode(QFileDialog.FileMode.Directory)
        dialog.setOption(QFileDialog.Option.ShowDirsOnly, True)
        while dialog.exec():
            chosen = dialog.selectedFiles()
            if not chosen:
                return ""
            absolute = Path(os.path.abspath(chosen[0]))
            root = _special_root(Path(os.path.realpath(absolute)))
            if root is None:
                return str(absolute)
            QMessageBox.warning(parent, caption, f"Choose another folder: {absolute} is inside "
                                                 f"{root}, the system's own files.")
        return ""


def open_file_name(parent: QWidget | None, caption: str, start: str, filters: str) -> str:
    """Ask for an existing file to read: its path, or "" when cancelled (a special file is
    refused with a message and the dialog asked again). The file is not opened here."""
    with _dialog(parent, caption, start) as dialog:
        dialog.setFileMode(QFileDialog.FileMode.ExistingFile)
        dialog.setNameFilters(filters.split(";;"))
        while dialog.exec():
            chosen = dialog.selectedFiles()
            if not chosen:
                return ""
            reason = special_path_reason(Path(chosen[0]))
            if reason is None:
                return str(Path(chosen[0]))
            QMessageBox.warning(parent, caption, f"Choose another file: {reason}.")
        return ""

