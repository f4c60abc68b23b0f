"""Conversations on disk: one JSON transcript per conversation in `data_dir()/conversations`,
written by the same exporter as File → Export (0600, atomically), listed newest first.

A file that cannot be read is left alone and skipped (with a log line): one damaged file
never hides the others.
"""

from __future__ import annotations

import logging
import re
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from app.conversation.transcript.entries import TranscriptEntry
from app.conversation.transcript.export import (
    TranscriptHeader,
    export_to_file,
    read_transcript,
    write_private,
)
from app.paths import data_dir

log = logging.getLogger(__name__)

_ID = re.compile(r"^[0-9A-Za-z][0-9A-Za-z_-]{0,80}$")
TITLE_CHARS = 60
DRAFT_FILE = "unsent-draft.txt"  # beside the transcripts; not a *.json, so never listed
_SAID = ("user", "assistant", "span", "tool")


def conversations_dir() -> Path:
    return data_dir() / "conversations"


def new_conversation_id(now: float | None = None) -> str:
    """Sortable by time, unique by its random tail: `20261129-101203-3fa9c2`."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(time.time() if now is None else now))
    return f"{stamp}-{uuid.uuid4().hex[:6]}"


def worth_keeping(entries: Sequence[TranscriptEntry]) -> bool:
    """Something was said, read or looked up: notices alone (the welcome) are not kept."""
    return any(entry.kind in _SAID for entry in entries)


def title_for(entries: Sequence[TranscriptEntry]) -> str:
    """The first thing the user said (or typed), shortened; else the first span's text.
    Never the model's words: before anyone speaks they are its babble."""
    for kind in ("user", "span"):
        for entry in entries:
            if entry.kind == kind and entry.text.strip():
                text = " ".join(entry.text.split())
                return text if len(text) <= TITLE_CHARS else text[: TITLE_CHARS - 1] + "…"
    return "Conversation"


@dataclass(frozen=True)
class ConversationSummary:
    conversation_id: str
    title: str
    started: float | None
    entries: int
    path: Path


class ConversationStore:
    def __init__(self, folder: Path | None = None) -> None:
        self.folder = Path(folder) if folder is not None else conversations_dir()
        # What each file said when it was last read, by its (inode, mtime, size): the list is
        # refreshed whenever a title changes or a conversation is deleted, on the GUI
        # thread, and re-reading every saved transcript each time grows with the history.
        self._read: dict[Path, tuple[tuple[int, int, int], ConversationSummary]] = {}
        self._read_lock = threading.Lock()

    def path_of(self, conversation_id: str) -> Path:
        if not _ID.match(conversation_id):
            raise ValueError(f"not a conversation id: {conversation_id!r}")
        return self.folder / f"{conversation_id}.json"

    def save(self, header: TranscriptHeader, entries: Sequence[TranscriptEntry]) -> Path:
        self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        return export_to_file(entries, self.path_of(header.conversation_id), header)

    def load(self, conversation_id: str) -> tuple[TranscriptHeader, list[TranscriptEntry]]:
        """Raises OSError (gone, unreadable) or ValueError (not a transcript)."""
        text = self.path_of(conversation_id).read_text(encoding="utf-8")
        return read_transcript(text)

    def delete(self, conversation_id: str) -> None:
        self.path_of(conversation_id).unlink(missing_ok=True)

    # ---- the text left unsent in the input box ----------------------------------------------

    def save_draft(self, text: str) -> None:
        """Keep what the user typed and has not sent (0600, atomically, like a transcript);
        blank text removes the file."""
        path = self.folder / DRAFT_FILE
        if not text.strip():
            path.unlink(missing_ok=True)
            return
        self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_private(path, text)

    def load_draft(self) -> str:
        """The unsent text kept by `save_draft` ("" when none, or when it cannot be read:
        the file is left alone for the user and the log says why)."""
        path = self.folder / DRAFT_FILE
        try:
            return path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return ""
        except (OSError, UnicodeDecodeError) as exc:
            log.warning("could not read the unsent draft %s: %s", path, exc)
            return ""

    def list(self) -> list[ConversationSummary]:
        """Every readable conversation, newest first."""
        found: list[ConversationSummary] = []
        try:
            paths = sorted(self.folder.glob("*.json"))
        except OSError:
            return []
        with self._read_lock:
            for path in paths:
                summary = self._summary_of(path)
                if summary is not None:
                    found.append(summary)
            for gone in self._read.keys() - set(paths):
                del self._read[gone]
        found.sort(key=lambda s: (s.started or 0.0, s.conversation_id), reverse=True)
        return found

    def summary(self, conversation_id: str) -> ConversationSummary | None:
        """One conversation as the list shows it (None when it cannot be read); read from
        the file only if it changed since the list last read it."""
        with self._read_lock:
            return self._summary_of(self.path_of(conversation_id))

    def _summary_of(self, path: Path) -> ConversationSummary | None:
        """The file's summary: read again only when the file changed. Writes replace the
        file whole (a new inode), so its inode, mtime or size changes with every write."""
        try:
            stat = path.stat()
            version = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
            known = self._read.get(path)
            if known is not None and known[0] == version:
                return known[1]
            header, entries = read_transcript(path.read_text(encoding="utf-8"))
        except (OSError, ValueError, UnicodeDecodeError) as exc:
            log.warning("skipping conversation file %s: %s", path, exc)
            self._read.pop(path, None)
            return None
        summary = ConversationSummary(
            conversation_id=header.conversation_id or path.stem,
            title=header.title or title_for(entries), started=header.started,
            entries=len(entries), path=path)
        self._read[path] = (version, summary)
        return summary
