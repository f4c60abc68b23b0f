"""A stdio server's stderr: each line to our log (secrets masked), the last ones kept to
say why a server failed.

The SDK hands the server a file for its stderr; by default that is ours, and a server's
chatter (or its crash) would land on the user's terminal. Here it is a pipe that a thread of
its own reads: a line becomes a record of the `app.tools.mcp.server` logger, the last lines
are kept, and a server that floods it costs a bounded number of log lines.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections import deque
from collections.abc import Callable, Sequence
from typing import TextIO

from app.tools.mcp.leash import PREFIX as LEASH_PREFIX
from app.tools.mcp.masking import mask

log = logging.getLogger("app.tools.mcp.server")
LINE_CHARS = 2000  # characters of one line kept
LOGGED_LINES = 200  # lines logged per start; the rest are counted
_JOIN_S = 2.0


class ServerLog:
    def __init__(self, server: str, secrets: Sequence[str], keep: int = 20) -> None:
        self.server = server
        self._secrets = tuple(secrets)
        self._last: deque[str] = deque(maxlen=keep)
        self._lock = threading.Lock()
        self._ended = threading.Event()
        self._on_end: Callable[[], None] | None = None
        read_fd, write_fd = os.pipe()
        self._reader = os.fdopen(read_fd, "rb")
        # What the SDK gives the server as stderr (only its file descriptor is used).
        self.for_server: TextIO | None = os.fdopen(write_fd, "w", encoding="utf-8",
                                                    errors="replace")
        self._thread = threading.Thread(target=self._read, name=f"mcp-stderr-{server}"[:60],
                                        daemon=True)
        self._thread.start()

    def spawned(self) -> None:
        """The server has its copy of the pipe: ours goes, so the reader sees the end when
        the server's does."""
        file, self.for_server = self.for_server, None
        if file is not None:
            with contextlib.suppress(OSError):
                file.close()

    def close(self) -> None:
        self.spawned()
        self._thread.join(_JOIN_S)

    def wait_ended(self, timeout: float | None = None) -> bool:
        """Wait (bounded) until the server's end of the pipe is closed: it has exited."""
        return self._ended.wait(timeout)

    def when_ended(self, callback: Callable[[], None]) -> None:
        """Call `callback` (on the reader's thread) once the server's stderr ends; at once
        when it has already."""
        with self._lock:
            self._on_end = callback
            ended = self._ended.is_set()
        if ended:
            callback()

    def last_lines(self) -> list[str]:
        with self._lock:
            return list(self._last)

    def why_failed(self) -> str | None:
        """The guard's own word on the server's end, else the server's last line."""
        lines = self.last_lines()
        for line in reversed(lines):
            if line.startswith(LEASH_PREFIX):
                return line[len(LEASH_PREFIX):].strip()
        return lines[-1] if lines else None

    def _read(self) -> None:
        logged = dropped = 0
        try:
            for raw in self._reader:
                line = mask(raw.decode("utf-8", errors="replace").rstrip(), self._secrets)
                line = line[:LINE_CHARS]
                if not line.strip():
                    continue
                with self._lock:
                    self._last.append(line)
                if logged < LOGGED_LINES:
                    logged += 1
                    log.info("%s: %s", self.server, line)
                else:
                    dropped += 1
        except (OSError, ValueError):
            pass
        finally:
            if dropped:
                log.info("%s: %d more lines of its stderr were not logged", self.server,
                         dropped)
            with contextlib.suppress(OSError):
                self._reader.close()
            with self._lock:
                self._ended.set()
                callback = self._on_end
            if callback is not None:
                callback()
