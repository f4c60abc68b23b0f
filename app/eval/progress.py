"""A progress bar with an ETA on stderr: redrawn in place on a terminal, one line per item
when stderr is a file or a pipe (a log stays readable)."""

from __future__ import annotations

import shutil
import time
from typing import TextIO


def _clock(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


class ProgressBar:
    WIDTH = 24

    def __init__(self, total: int, stream: TextIO, label: str = "") -> None:
        self.total = total
        self.stream = stream
        self.label = label
        self.redraw = stream.isatty()
        self._started = time.monotonic()
        self._timed = 0  # items run (not skipped) since the start: the ETA's basis
        self._done = 0

    def line(self, done: int, note: str = "") -> str:
        filled = self.WIDTH * done // self.total if self.total else self.WIDTH
        elapsed = time.monotonic() - self._started
        if self._timed:
            eta = f"ETA {_clock(elapsed / self._timed * (self.total - done))}"
        else:
            eta = "ETA --:--"
        bar = "#" * filled + "-" * (self.WIDTH - filled)
        return (f"{self.label} [{bar}] {done}/{self.total}  {_clock(elapsed)} elapsed  {eta}"
                f"  {note}").rstrip()

    def advance(self, note: str = "", timed: bool = True) -> None:
        """One more item done; `timed`: it ran (a resumed item does not count for the ETA)."""
        self._done += 1
        self._timed += 1 if timed else 0
        text = self.line(self._done, note)
        if self.redraw:
            width = shutil.get_terminal_size().columns - 1
            self.stream.write("\r" + text[:width].ljust(width))
            if self._done == self.total:
                self.stream.write("\n")
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def message(self, text: str) -> None:
        """A line of its own (a skipped item), not overwritten by the bar."""
        if self.redraw:
            self.stream.write("\r" + " " * (shutil.get_terminal_size().columns - 1) + "\r")
        self.stream.write(text + "\n")
        self.stream.flush()
