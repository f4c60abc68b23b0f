"""Qt's own messages go to the log (app/log_setup.py), not the terminal; with
QT_DEBUG_PLUGINS set they go to the terminal too. A platform plugin that cannot load is said
on the terminal with what is missing and how to install it (app/ui/qt_platform.py), and the
app exits with an error instead of Qt's abort."""

from __future__ import annotations

import logging
import os
import sys
from collections import deque

EXIT_NO_WINDOW = 1  # as any other error of the app (Qt's own abort was 134)
_KEPT = 40  # Qt's last messages, for explaining a failure to start


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
    echo = bool(os.environ.get("QT_DEBUG_PLUGINS"))  # asked for on the terminal
    recent: deque[str] = deque(maxlen=_KEPT)

    def to_log(kind: QtMsgType, context: object, message: str) -> None:
        category = getattr(context, "category", None)
        where = f"{category}: " if category and category != "default" else ""
        recent.append(f"{where}{message}")
        if echo:
            print(f"{where}{message}", file=sys.stderr)
        if kind == QtMsgType.QtFatalMsg:
            from app.ui.qt_platform import is_platform_failure

            if is_platform_failure(message):
                _no_window(qt_log, f"{where}{message}", list(recent))
        qt_log.log(levels.get(kind, logging.WARNING), "%s%s", where, message)

    qInstallMessageHandler(to_log)


def _no_window(qt_log: logging.Logger, message: str, said: list[str]) -> None:
    """Qt cannot open a window and is about to abort: say why on the terminal (Qt's own
    words go to the log) and end the process as an error."""
    from app.log_setup import log_path
    from app.ui.qt_platform import explain_platform_failure

    explained = explain_platform_failure(said)
    # Both to the log only (the "qt" logger's errors stay off the terminal): the terminal
    # gets the explanation once, below.
    qt_log.error("%s", message)
    qt_log.error("%s", explained.removeprefix("error: "))
    print(f"{explained}\n(details: {log_path()})", file=sys.stderr)
    logging.shutdown()
    sys.stderr.flush()
    os._exit(EXIT_NO_WINDOW)
