"""What a conversation session tells its listener (the window, in the app), recorded for a
test: its states, its transcript's entries, its statuses; and a wait on any of them."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class Recorder:
    def __init__(self) -> None:
        self.states: list[tuple[str, str]] = []
        self.entries: dict[int, object] = {}  # the latest version of each entry, by id
        self.notices: list[str] = []  # each notice's text, as it came
        self.spans: list[str] = []  # the sources of the spans that landed (a final entry)
        self.statuses: list = []
        self.changed = threading.Condition()

    def on_state(self, state: str, detail: str) -> None:
        with self.changed:
            self.states.append((state, detail))
            self.changed.notify_all()

    def on_entry(self, entry) -> None:
        with self.changed:
            self.entries[entry.entry_id] = entry
            if entry.kind == "notice":
                self.notices.append(entry.text)
            elif entry.kind == "span" and entry.final:
                self.spans.append(entry.source)
            self.changed.notify_all()

    def on_status(self, status) -> None:
        with self.changed:
            self.statuses.append(status)
            self.changed.notify_all()

    def wait(self, predicate: Callable[[], object], timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        with self.changed:
            while not predicate():
                remaining = deadline - time.monotonic()
                assert remaining > 0, f"timed out; states {self.states}, " + (
                    f"last status {self.statuses[-1]}" if self.statuses else "no status")
                self.changed.wait(remaining)

    def of(self, kind: str) -> list:
        return [e for e in self.entries.values() if e.kind == kind]
