"""The conversation shown in the window, kept on disk as it goes.

A conversation is what the transcript panel holds between two "New conversation"s: it may
span several Start/Stop sessions. It is autosaved a few seconds after it changes by a thread
of its own (conversation/transcript/autosave.py), which hears the session's entries straight
from the session's thread: a busy or frozen GUI thread does not stop it. "New conversation"
saves it and starts an empty one; entries that arrive late from the old one's session (the
close of its last utterance, a request cancelled by the stop) are told apart by their origin
and go to the saved file, never into the new transcript.

What the user typed and has not sent is kept too, by the same writer and timer: the input
box's draft goes beside the saved conversations, and the next start puts it back in the box.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field, replace

from PySide6.QtCore import QObject, QTimer, Signal, Slot

from app.conversation.session import SessionStatus
from app.conversation.transcript.autosave import LiveAutosave
from app.conversation.transcript.builder import llm_label
from app.conversation.transcript.entries import STOPPED, TranscriptEntry, closed
from app.conversation.transcript.export import TranscriptHeader
from app.conversation.transcript.saved import (
    ConversationStore,
    new_conversation_id,
    title_for,
    worth_keeping,
)
from app.settings.schema import AppSettings
from app.ui.gui_bridge import ToGui
from app.ui.transcript_panel import TranscriptPanel

log = logging.getLogger(__name__)

AUTOSAVE_MS = 3000
FLUSH_TIMEOUT_S = 5.0


def describe_llm(settings: AppSettings) -> str:
    """The LLM as a transcript header names it. Its tools are not the settings' list (a
    tool that cannot be built is left out, the MCP servers' join when ready): a running
    session says which it offers (SessionStatus.tools)."""
    llm = settings.llm
    if llm.backend == "none":
        return "off"
    return f"{llm_label(llm.backend, llm.model)} at {llm.host}"


def _then(used: list, value: object) -> bool:
    """Append `value` when it differs from the last one used; True when it did."""
    if used and used[-1] == value:
        return False
    used.append(value)
    return True


@dataclass
class _Archived:
    """A conversation put away this run, kept so late entries from its session land in it."""

    header: TranscriptHeader
    entries: list[TranscriptEntry] = field(default_factory=list)

    def upsert(self, entry: TranscriptEntry) -> None:
        for row, old in enumerate(self.entries):
            if old.key == entry.key:
                self.entries[row] = entry
                return
        self.entries.append(entry)


class ConversationKeeper(QObject):
    listChanged = Signal()  # a conversation was saved for the first time, started, deleted
    saveFailed = Signal(str)

    def __init__(self, panel: TranscriptPanel, store: ConversationStore,
                 settings: Callable[[], AppSettings], parent: QObject | None = None,
                 autosave_ms: int = AUTOSAVE_MS) -> None:
        super().__init__(parent)
        self.panel = panel
        self.store = store
        self._settings = settings
        self.conversation_id = new_conversation_id()
        self.started: float | None = None
        self._origins: set[str] = set()  # the sessions that wrote into this conversation
        self._local_origin = f"app-{uuid.uuid4().hex[:8]}"
        self._archived: dict[str, _Archived] = {}  # conversation id -> its entries
        self._archived_origins: dict[str, str | None] = {}  # origin -> id (None: deleted)
        self._model = ""
        self._device = ""
        # What this conversation ran on, in order (see TranscriptHeader), and its restarts.
        self._models: list[str] = []
        self._devices: list[str] = []
        self._llms: list[str] = []
        self._tool_sets: list[tuple[str, ...]] = []
        self._restarts = 0
        self._running = False  # a session runs in this conversation now
        self._restart_pending = False  # marked once the restarted session's model runs
        self._marker_ids = itertools.count(1)  # the keeper's own notices (local origin;
        # the controller's are numbered from -1 down)
        self._listed = False  # the current conversation has a file (it is in the list)
        self._listed_title = ""  # the title it was last written with
        # The current conversation's copy and the store's one writer (its own thread).
        # The writer's thread reports through the bridge: (id, changes, error or "") and
        # (the draft written, error or "").
        self._done = ToGui(self._written)
        self._draft_done = ToGui(self._draft_written_out)
        self._autosave = LiveAutosave(store, autosave_ms / 1000, on_written=self._done.post)
        self._pending: Future | None = None
        self._error: str | None = None
        self._draft = ""  # the input box's unsent text, as last noted
        self._draft_written = ""  # ... as last handed to the writer
        self._draft_saved = ""  # ... as it is on disk
        self._pending_draft: tuple[Future, str] | None = None
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(autosave_ms)
        self._timer.timeout.connect(self.save)
        self._autosave.set_header(self._header_base())

    # ---- what arrives -------------------------------------------------------------------

    def from_session(self, entry: TranscriptEntry) -> None:
        """An entry on its session's thread (ConversationController.entry_sinks): to the
        autosave at once, before the GUI thread draws it."""
        if entry.origin:  # the window's own notices come through on_entry
            self._autosave.from_session(entry)

    @Slot(object)
    def on_entry(self, entry: TranscriptEntry) -> None:
        """Every entry from the controller: into the panel, or into the conversation its
        session belongs to when that one was put away."""
        if not entry.origin:  # the window's own notices: numbered apart from any session
            entry = replace(entry, origin=self._local_origin)
        elif entry.origin in self._archived_origins:
            conversation_id = self._archived_origins[entry.origin]
            if conversation_id is not None:
                archived = self._archived[conversation_id]
                archived.upsert(entry)
                self._write(archived.header, list(archived.entries))
            return
        self.panel.upsert(entry)
        self._autosave.from_window(entry)  # a session's: kept only when not heard directly
        if entry.origin != self._local_origin:
            self._origins.add(entry.origin)
        self._changed()

    def note_status(self, status: SessionStatus) -> None:
        """What the session runs on: the header lists each speech model and device used,
        and a restart's marker names the new one."""
        if not status.model:
            return
        if self._running and _then(self._tool_sets, status.tools):  # offered to the LLM now
            self._autosave.set_header(self._header_base())
        self._model = f"{status.model} ({status.dtype})" if status.dtype else status.model
        self._device = status.device or "an unknown device"
        if status.server:
            self._device = f"{self._device} on the server at {status.server}"
        changed = _then(self._models, self._model) | _then(self._devices, self._device)
        if self._restart_pending:  # the first status of a later session: it runs now
            self._restart_pending = False
            self._restarts += 1
            self.on_entry(TranscriptEntry(
                next(self._marker_ids), "notice",
                f"The speech model started again, {self._model} on {self._device}: it does "
                "not know what was said or read above (this transcript keeps it; a span's "
                "context menu, Send again, reads it to the model again).",
                time.time(), origin=self._local_origin, detail="info"))
        elif changed:
            self._changed()

    def note_started(self) -> None:
        """A session started in this conversation: the first one dates it, a later one (Stop
        and Start, a restart for new settings, New conversation's fresh model) is marked
        where it happened, since the model forgets what came before."""
        if self._running:  # "loading" comes several times per start
            return
        self._running = True
        self._note_llm()
        if self.started is None:
            self.started = time.time()
            self._changed()
        elif self._models:  # a session ran in this conversation before: mark this one
            self._restart_pending = True

    def _note_llm(self) -> None:
        """The LLM of a running conversation, appended when it changed (its tools come with
        the session's status)."""
        if self._running and _then(self._llms, describe_llm(self._settings())):
            self._autosave.set_header(self._header_base())

    def close_open(self, reason: str = STOPPED) -> None:
        """A session ended: what it left open is closed, here and in put-away conversations."""
        self._running = self._restart_pending = False
        self._autosave.close_open(reason)
        if self.panel.close_open(reason):
            self._changed()
        for archived in self._archived.values():
            if any(not e.final for e in archived.entries):
                archived.entries = [closed(e, reason) for e in archived.entries]
                self._write(archived.header, list(archived.entries))

    # ---- saving -----------------------------------------------------------------------------

    def _header_base(self) -> TranscriptHeader:
        """What the conversation ran on (no title: that comes from its entries)."""
        self._note_llm()
        # The last a session ran with, not what Settings say now.
        llm = self._llms[-1] if self._llms else describe_llm(self._settings())
        tools = self._tool_sets[-1] if self._tool_sets else ()
        return TranscriptHeader(conversation_id=self.conversation_id, started=self.started,
                                model=self._model, device=self._device, llm=llm, tools=tools,
                                models=tuple(self._models), devices=tuple(self._devices),
                                llms=tuple(self._llms), tool_sets=tuple(self._tool_sets),
                                restarts=self._restarts)

    def header(self) -> TranscriptHeader:
        """The header of the conversation as the window shows it (File → Export)."""
        entries = self.panel.entries()
        started = self.started
        if started is None:
            said = [e.wall_time for e in entries if e.kind != "notice"]
            started = said[0] if said else None
        return replace(self._header_base(), title=title_for(entries), started=started)

    def _changed(self) -> None:
        self._autosave.set_header(self._header_base())
        self._autosave.touch()
        if not self._timer.isActive():  # the GUI's own save, at most one per interval
            self._timer.start()

    @Slot()
    def save(self) -> None:
        """The GUI's part of saving, once per interval: the unsent draft, the header, and
        the list's title. The conversation itself the autosave writes on its own interval,
        GUI thread or not (`flush` asks it to write now)."""
        self._timer.stop()
        self._save_draft()
        self._autosave.set_header(self._header_base())
        title = title_for(self.panel.entries())
        if self._listed and title != self._listed_title:  # the user's first words
            self.listChanged.emit()
        self._listed_title = title

    def _write(self, header: TranscriptHeader, entries: list[TranscriptEntry]) -> None:
        """A put-away conversation's write, after the writes asked before it."""
        future = self._autosave.submit(self.store.save, header, entries)
        self._pending = future  # writes run in order: waiting for the last waits for all
        conversation_id = header.conversation_id
        done = self._done  # the callback holds the bridge's handle, not the keeper
        done.expect()
        future.add_done_callback(lambda f: done.post_last(
            conversation_id, -1, "" if f.exception() is None else str(f.exception())))

    @Slot(str, int, str)
    def _written(self, conversation_id: str, changes: int, error: str) -> None:
        if error:
            self._error = error
            log.warning("could not save the conversation: %s", error)
            self.saveFailed.emit(error)
            return
        self._error = None
        if changes >= 0 and conversation_id == self.conversation_id and not self._listed:
            self._listed = True
            self.listChanged.emit()

    # ---- the unsent draft ---------------------------------------------------------------------

    def note_draft(self, text: str) -> None:
        """The input box changed: its text is written with the next autosave."""
        if text != self._draft:
            self._draft = text
            if not self._timer.isActive():
                self._timer.start()

    def restore_draft(self) -> str:
        """The draft left by the last run (or by a crash), now the box's text."""
        self._draft = self._draft_written = self._draft_saved = self.store.load_draft()
        return self._draft

    def _save_draft(self) -> None:
        if self._draft == self._draft_written:
            return
        text = self._draft_written = self._draft
        future = self._autosave.submit(self.store.save_draft, text)
        self._pending = future
        self._pending_draft = (future, text)
        draft_done = self._draft_done
        draft_done.expect()
        future.add_done_callback(lambda f: draft_done.post_last(
            text, "" if f.exception() is None else str(f.exception())))

    @Slot(str, str)
    def _draft_written_out(self, text: str, error: str) -> None:
        if error:
            self._draft_written = self._draft_saved  # the next save tries again
            self._error = error
            log.warning("could not save the unsent text: %s", error)
            self.saveFailed.emit(f"{error} (the unsent text in the box)")
            return
        self._draft_saved = text

    # ---- closing ----------------------------------------------------------------------------

    def flush(self, timeout: float = FLUSH_TIMEOUT_S) -> None:
        """Save now and wait (bounded) for the write."""
        self._save_draft()
        if not self._autosave.saved():
            self.save()
            self._pending = self._autosave.write_now()
        if self._pending is not None:
            try:
                self._pending.result(timeout)
            except FutureTimeout:
                log.warning("saving the conversation takes longer than %.0f s", timeout)
                return
            except Exception as exc:  # said by _written too, later
                self._error = str(exc)
        if self._pending_draft is not None:
            future, text = self._pending_draft
            if future.done() and future.exception() is None and text == self._draft_written:
                self._draft_saved = text

    def has_unsaved(self) -> bool:
        """Whether closing now would lose something: it saves what is pending first, so this
        is True only when the conversation could not be written (or the write hangs)."""
        # What was there when asked: a live conversation keeps adding entries while it
        # winds down, and those are written by the autosave's last write on close.
        asked = self._autosave.version()
        self.flush()
        return not self._autosave.saved(asked) or self._draft != self._draft_saved

    @property
    def save_error(self) -> str | None:
        return self._error

    # ---- conversations ----------------------------------------------------------------------

    def new_conversation(self) -> None:
        """Put the current conversation away (saved) and start an empty one."""
        self.flush()
        entries = self.panel.entries()
        previous = self.conversation_id
        if worth_keeping(entries):
            self._archived[self.conversation_id] = _Archived(self.header(), entries)
            for origin in self._origins:
                self._archived_origins[origin] = self.conversation_id
        else:  # nothing to keep: its session's late entries are dropped with it
            for origin in self._origins:
                self._archived_origins[origin] = None
        self.panel.clear()
        self.conversation_id = new_conversation_id()
        owner = previous if previous in self._archived else None
        for origin in self._autosave.switch(self.conversation_id, keep=self._local_origin):
            # a session the window had not heard from yet: its late entries go with the old
            self._archived_origins.setdefault(origin, owner)
        self.started = None
        self._models, self._devices, self._llms, self._tool_sets = [], [], [], []
        self._restarts, self._restart_pending = 0, False
        self._origins = set()
        self._listed, self._listed_title = False, ""
        self._autosave.set_header(self._header_base())
        self.listChanged.emit()

    def delete(self, conversation_id: str) -> None:
        """Delete a saved conversation (never the current one)."""
        if conversation_id == self.conversation_id:
            raise ValueError("the current conversation cannot be deleted; start a new one first")
        if self._pending is not None:  # a late write must not bring it back
            with contextlib.suppress(Exception):
                self._pending.result(FLUSH_TIMEOUT_S)
        if conversation_id in self._archived:
            del self._archived[conversation_id]
            for origin, owner in self._archived_origins.items():
                if owner == conversation_id:
                    self._archived_origins[origin] = None
        self.store.delete(conversation_id)
        self.listChanged.emit()

    def shutdown(self) -> None:
        self.flush()
        if not self._autosave.close(FLUSH_TIMEOUT_S):
            log.warning("the autosave was still writing after %.0f s", FLUSH_TIMEOUT_S)
