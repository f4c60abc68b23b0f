"""Qt's own messages go to the log (app/log_setup.py), not the terminal."""

from __future__ import annotations

import logging


def install_qt_message_handler() -> None:
    """Route Qt's own messages (qDebug … qFatal, e.g. its repeated size-hint warnings) into
    the log instead of the terminal. Call it before the QApplication is made."""
    from PySide6.QtCore import QtMsgType, qInstallMessageHandler

    qt_log = logging.getLogger("qt")
    levels = {
        QtMsgType.QtDebugMsg: logging.DEBUG,
        QtMsgType.QtInfoMsg: logging.INFO,
        QtMsgType.QtWarningMsg: logging.WARNING,
        QtMsgType.QtCriticalMsg: logging.ERROR,
        QtMsgType.QtFatalMsg: logging.CRITICAL,  # Qt aborts after this: the terminal shows it
    }

    def to_log(kind: QtMsgType, context: object, message: str) -> None:
        category = getattr(context, "category", None)
        where = f"{category}: " if category and category != "default" else ""
        qt_log.log(levels.get(kind, logging.WARNING), "%s%s", where, message)

    qInstallMessageHandler(to_log)
