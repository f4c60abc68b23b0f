"""Where log records go: a rotating file in the data dir, and the terminal only for what a
person must see there.

Unconfigured, Python prints every library's warnings on stderr (its "last resort" handler)
and drops everything else, tracebacks of handled errors included. Here the file gets it all
(our INFO and up, DEBUG with `--debug`, other libraries' INFO and up, the `warnings` module's
UserWarnings from moshi or torch, Qt's own messages once app/ui/qt_messages.py's handler is
called); the terminal gets our warnings and errors, anyone's CRITICAL, and with `--debug`
everything the file gets. The CLI speaks to the terminal itself (one line per error), so its
own log records stay in the file unless `--debug` is on.
"""

from __future__ import annotations

import logging
import sys
from logging.handlers import RotatingFileHandler
from pathlib import Path

from app.paths import data_dir

LOG_FILE_NAME = "contextspan.log"
MAX_BYTES = 2 * 1000 * 1000  # per file; with the backups at most 12 MB on disk
BACKUP_COUNT = 5
FILE_FORMAT = "%(asctime)s [%(threadName)s] %(name)s %(levelname)s: %(message)s"
TERMINAL_FORMAT = "%(levelname)s %(name)s: %(message)s"
OUR_LOGGERS = "app"  # every module logs to getLogger(__name__) under the `app` package
CLI_LOGGERS = "app.cli"  # the CLI prints its own one-line messages
_MARK = "_contextspan_handler"  # on the handlers this module installed, to replace them

log = logging.getLogger(__name__)


def log_path() -> Path:
    """The current log file (older ones sit beside it as .1 … .5)."""
    return data_dir() / "logs" / LOG_FILE_NAME


def _under(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


class _TerminalFilter(logging.Filter):
    """Without --debug: our warnings and errors (not the CLI's, it prints its own), and
    anyone's CRITICAL."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.CRITICAL:
            return True
        return _under(record.name, OUR_LOGGERS) and not _under(record.name, CLI_LOGGERS)


class _NoTracebackFormatter(logging.Formatter):
    """One line per record on the terminal: the traceback is in the file."""

    def format(self, record: logging.LogRecord) -> str:
        brief = logging.makeLogRecord(record.__dict__)
        brief.exc_info, brief.exc_text, brief.stack_info = None, None, None
        return super().format(brief)


def configure_logging(debug: bool = False) -> Path:
    """Send log records to `log_path()` and, briefly, to stderr; returns the log's path.

    Calling it again replaces what an earlier call installed. If the log file cannot be
    opened (a read-only data dir), the terminal still gets its share and a warning says why.
    """
    root = logging.getLogger()
    for handler in [h for h in root.handlers if getattr(h, _MARK, False)]:
        root.removeHandler(handler)
        handler.close()
    root.setLevel(logging.INFO)  # other libraries' DEBUG stays out even with --debug
    logging.getLogger(OUR_LOGGERS).setLevel(logging.DEBUG if debug else logging.INFO)

    terminal = logging.StreamHandler(sys.stderr)
    if debug:
        terminal.setFormatter(logging.Formatter(TERMINAL_FORMAT))
    else:
        terminal.setLevel(logging.WARNING)
        terminal.addFilter(_TerminalFilter())
        terminal.setFormatter(_NoTracebackFormatter(TERMINAL_FORMAT))
    handlers: list[logging.Handler] = [terminal]

    path = log_path()
    problem = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        file_handler = RotatingFileHandler(path, maxBytes=MAX_BYTES, backupCount=BACKUP_COUNT,
                                           encoding="utf-8")
    except OSError as exc:
        problem = exc
    else:
        file_handler.setFormatter(logging.Formatter(FILE_FORMAT))
        handlers.append(file_handler)
    for handler in handlers:
        setattr(handler, _MARK, True)
        root.addHandler(handler)
    logging.captureWarnings(True)  # the `warnings` module's messages become "py.warnings"
    if problem is not None:
        log.warning("the log cannot be written to %s (%s)", path, problem)
    log.debug("logging to %s (debug on)", path)
    return path
