"""The conversation's autosave, on a thread of its own: it never waits for the GUI thread.

The window's transcript lives on the GUI thread, and a frozen GUI thread (a file dialog
blocked in read() once) used to stop autosave with it. Here the session's entries reach a
copy of the current conversation straight from the session's thread (`from_session`), the
window's own entries and header from the GUI thread (`from_window`, `set_header`), and one
writer thread saves that copy a few seconds after it changed, whoever is busy. The same
thread runs every other write of the conversation store (put-away conversations, the unsent
draft), in the order they were asked, so two writes of one file never race.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import replace
from typing import Any

from app.conversation.transcript.entries import STOPPED, TranscriptEntry, closed
from app.conversation.transcript.export import TranscriptHeader
from app.conversation.transcript.saved import ConversationStore, title_for, worth_keeping

log = logging.getLogger(__name__)
SWITCH_WAIT_S = 5.0  # how long a new conversation waits for the old one's write in flight

Written = Callable[[str, int, str], None]  # (conversation id, version, error or "")


class LiveAutosave:
    """The current conversation's copy, and the one thread that writes the store."""

    def __init__(self, store: ConversationStore, interval_s: float,
                 on_written: Written | None = None) -> None:
        self.store = store
        self.interval_s = interval_s
        self.on_written = on_written
        self._cond = threading.Condition()
        self._entries: dict[tuple[str, int], TranscriptEntry] = {}  # in arrival order
        self._header = TranscriptHeader()
        self._direct: set[str] = set()  # origins whose entries come from their session
        self._ignored: set[str] = set()  # origins of put-away conversations
        self._version = 0  # changes to the current conversation's copy
        self._written = 0  # ... of which this many are on disk (or not worth a file)
        self._due: float | None = None  # monotonic time of the next write, when dirty
        self._jobs: collections.deque[tuple[Future[Any], Callable[[], Any]]] = collections.deque()
        self._busy = False
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="autosave", daemon=True)
        self._thread.start()

    # ---- what changes the copy (any thread) -------------------------------------------------

    def from_session(self, entry: TranscriptEntry) -> None:
        """An entry as its session made it, on the session's thread."""
        with self._cond:
            if entry.origin in self._ignored:
                return
            self._direct.add(entry.origin)
            self._upsert(entry)

    def from_window(self, entry: TranscriptEntry) -> None:
        """An entry the window showed: its own notices, and a session's entries when its
        session does not reach here directly (then the window's order is the only one)."""
        with self._cond:
            if entry.origin in self._ignored or entry.origin in self._direct:
                return
            self._upsert(entry)

    def set_header(self, header: TranscriptHeader) -> None:
        """What the conversation ran on (its title is made from the entries when written)."""
        with self._cond:
            if header != self._header:
                self._header = header
                self._touch()

    def touch(self) -> None:
        with self._cond:
            self._touch()

    def close_open(self, reason: str = STOPPED) -> None:
        with self._cond:
            if any(not e.final for e in self._entries.values()):
                self._entries = {k: closed(e, reason) for k, e in self._entries.items()}
                self._touch()

    def switch(self, conversation_id: str, keep: str = "") -> set[str]:
        """A new, empty conversation: entries of the old one's sessions are not kept here any
        more (the caller keeps them with the old one). Returns those sessions' origins.
        `keep`: an origin that goes on into the new one (the window's own notices)."""
        with self._cond:
            # A write of the old one in flight finishes first, within a bound: this runs on
            # the GUI thread, and a write stuck on a stalled disk must not freeze the window
            # (it saves the old conversation's id, so it cannot touch the new one's file).
            deadline = time.monotonic() + SWITCH_WAIT_S
            while self._busy and time.monotonic() < deadline:
                self._cond.wait(0.1)
            if self._busy:
                log.warning("the previous conversation's save is still running")
            old = ({origin for origin, _ in self._entries} | self._direct) - {keep}
            self._ignored |= old
            self._direct = set()
            self._entries = {}
            self._header = TranscriptHeader(conversation_id=conversation_id)
            self._version = self._written = 0
            self._due = None
            return old

    def _upsert(self, entry: TranscriptEntry) -> None:
        self._entries[entry.key] = entry
        self._touch()

    def _touch(self) -> None:
        self._version += 1
        if self._due is None:  # at most one write per interval while it grows
            self._due = time.monotonic() + self.interval_s
            self._cond.notify_all()

    # ---- reading -------------------------------------------------------------------------

    def snapshot(self) -> tuple[TranscriptHeader, list[TranscriptEntry], int]:
        """The header (titled from the entries) and the entries as they would be saved."""
        with self._cond:
            entries = list(self._entries.values())
            header, version = self._header, self._version
        if header.started is None:
            said = [e.wall_time for e in entries if e.kind != "notice"]
            header = replace(header, started=said[0] if said else None)
        return replace(header, title=title_for(entries)), entries, version

    def saved(self, version: int | None = None) -> bool:
        """Everything the copy holds is on disk (or was not worth a file); with `version`,
        everything it held at that version (entries that came since may still be due)."""
        with self._cond:
            return self._written >= (self._version if version is None else version)

    def version(self) -> int:
        """The copy's version now (each change raises it)."""
        with self._cond:
            return self._version

    # ---- writing -------------------------------------------------------------------------

    def submit(self, job: Callable[..., Any], *args: Any) -> Future[Any]:
        """Run `job(*args)` on the writer thread after the writes asked before it."""
        future: Future[Any] = Future()
        with self._cond:
            if self._closed:
                future.set_exception(RuntimeError("the autosave has stopped"))
                return future
            self._jobs.append((future, lambda: job(*args)))
            self._cond.notify_all()
        return future

    def write_now(self) -> Future[int]:
        """Write the current copy now (after the writes asked before); the Future is done
        once it is on disk, with the version written."""
        return self.submit(self._write_current)

    def _write_current(self) -> int:
        header, entries, version = self.snapshot()
        with self._cond:
            self._due = None
        if not header.conversation_id:
            return version
        keep = worth_keeping(entries)
        if keep:
            try:
                self.store.save(header, entries)
            except Exception as exc:
                self._report(header.conversation_id, version, str(exc) or type(exc).__name__)
                raise
        with self._cond:
            if header.conversation_id == self._header.conversation_id:
                self._written = max(self._written, version)
        if keep:  # said only when there is a file
            self._report(header.conversation_id, version, "")
        return version

    def _report(self, conversation_id: str, version: int, error: str) -> None:
        if self.on_written is not None:
            try:
                self.on_written(conversation_id, version, error)
            except Exception:  # a listener's failure must not stop the saves
                log.exception("the autosave's listener failed")

    def _run(self) -> None:
        while True:
            future: Future[Any]
            job: Callable[[], Any]
            with self._cond:
                while True:
                    if self._jobs:
                        future, job = self._jobs.popleft()
                        break
                    now = time.monotonic()
                    if self._due is not None and now >= self._due:
                        future, job = Future(), self._write_current
                        break
                    if self._closed:
                        if self._due is None:
                            return
                        future, job = Future(), self._write_current  # the last changes
                        break
                    self._cond.wait(None if self._due is None else self._due - now)
                self._busy = True
            try:
                if future.set_running_or_notify_cancel():
                    try:
                        future.set_result(job())
                    except Exception as exc:  # handed to the Future's owner
                        if not future.done():
                            future.set_exception(exc)
                        log.warning("an autosave write failed: %s", exc)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def close(self, timeout: float) -> bool:
        """Stop after the writes asked so far (bounded); True when the thread ended."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout)
        return not self._thread.is_alive()
