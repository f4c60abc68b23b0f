"""Full-text search over the folders the user chose, with an SQLite FTS5 index.

The containment rule is the point of this file: nothing outside the chosen folders is ever
read. Roots are resolved once; the walk never descends into symlinked folders and skips
symlinked files (whatever they point to); every file is re-resolved and must lie inside its
root before it is opened, and it is opened with O_NOFOLLOW where the OS has it. A sub-folder
argument from the LLM is refused if it is absolute or contains `..`.

The query is free text from the LLM: it is split into words and each word is quoted for
FTS5, so FTS syntax (`OR`, `NEAR(`, `*`, `"`, column filters) is searched as plain words and
can neither fail nor change the query.
"""

from __future__ import annotations

import hashlib
import os
import re
import sqlite3
import stat
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path, PurePosixPath
from typing import Any

from app.tools.base import Tool, ToolResult

TEXT_EXTENSIONS = frozenset({
    ".txt", ".md", ".markdown", ".rst", ".org", ".tex", ".py", ".json", ".csv", ".tsv",
    ".html", ".htm", ".xml", ".yaml", ".yml", ".toml", ".ini", ".cfg", ".log",
})
SKIP_DIRS = frozenset({"node_modules", "__pycache__", "venv", "site-packages"})
DEFAULT_MAX_FILE_BYTES = 1_000_000  # only this much of a file is indexed
DEFAULT_MAX_FILES = 50_000
DEFAULT_RESULTS = 5
MAX_RESULTS = 20
MAX_QUERY_TERMS = 16
SCHEMA_VERSION = "1"
_BINARY_PROBE = 8192
_OPEN_FLAGS = (os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
               | getattr(os, "O_BINARY", 0))


@dataclass(frozen=True)
class RefreshStats:
    indexed: int  # files (re)read this time
    unchanged: int
    removed: int
    skipped: int  # binary, unreadable, symlinked or escaping files


class _HtmlText(HTMLParser):
    """Visible text of an HTML file, linear in its size (no regex backtracking)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._hidden = 0

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag in ("script", "style"):
            self._hidden += 1

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style") and self._hidden:
            self._hidden -= 1

    def handle_data(self, data: str) -> None:
        if not self._hidden:
            self.parts.append(data)


def _html_to_text(source: str) -> str:
    parser = _HtmlText()
    parser.feed(source)
    parser.close()
    return " ".join(parser.parts)


def _decode(data: bytes) -> str | None:
    """Text, or None for binary data (a NUL byte near the start)."""
    if b"\x00" in data[:_BINARY_PROBE]:
        return None
    text = data.decode("utf-8", errors="replace")
    if text.count("\ufffd") > len(text) // 100 + 4:  # not UTF-8: most likely Windows-1252
        text = data.decode("cp1252", errors="replace")
    return text


def fts_query(text: str) -> list[str]:
    """The words of a free-text query, each quoted as an FTS5 string (quotes doubled)."""
    terms: list[str] = []
    for word in re.findall(r"\w+", text.lower()):
        quoted = '"' + word.replace('"', '""') + '"'
        if quoted not in terms:
            terms.append(quoted)
    return terms[:MAX_QUERY_TERMS]


def safe_subfolder(value: str) -> PurePosixPath:
    """A relative sub-folder from the LLM, or ValueError: no absolute paths, drives or `..`."""
    cleaned = value.strip().replace("\\", "/")
    if "\x00" in cleaned:
        raise ValueError("the folder name contains a NUL character")
    if cleaned.startswith("/") or re.match(r"^[A-Za-z]:", cleaned) or cleaned.startswith("~"):
        raise ValueError("the folder must be relative to a chosen folder, not absolute")
    parts = [part for part in cleaned.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise ValueError("the folder may not contain '..'")
    return PurePosixPath(*parts)


class LocalFolderSearchTool(Tool):
    """Searches the user's chosen folders; never reads outside them."""

    name = "local_search"
    description = (
        "Search the user's own documents and notes (the folders they chose) by keywords. "
        "Returns the best matching files with a short snippet of each."
    )
    parameters: Mapping[str, Any] = {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "Keywords to look for"},
            "folder": {
                "type": "string",
                "description": "Optional sub-folder to search in, relative to a chosen "
                               "folder, e.g. 'notes/2026'",
            },
            "max_results": {
                "type": "integer", "minimum": 1, "maximum": MAX_RESULTS,
                "description": f"How many files (default {DEFAULT_RESULTS})",
            },
        },
        "required": ["query"],
    }

    def __init__(self, folders: Sequence[str | os.PathLike[str]],
                 index_dir: str | os.PathLike[str] | None = None,
                 max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
                 max_files: int = DEFAULT_MAX_FILES,
                 extensions: frozenset[str] = TEXT_EXTENSIONS,
                 stale_after_s: float = 300.0) -> None:
        """`index_dir` None keeps the index in memory; otherwise it persists there and later
        refreshes only re-read files whose size or mtime changed. The index is refreshed on
        first use and again when older than `stale_after_s`."""
        self.roots = self._resolve_roots(folders)
        self.max_file_bytes = max_file_bytes
        self.max_files = max_files
        self.extensions = frozenset(ext.lower() for ext in extensions)
        self.stale_after_s = stale_after_s
        self._labels = self._root_labels(self.roots)
        self._lock = threading.Lock()
        self._refreshed_at: float | None = None
        self._db = self._open(index_dir)

    # -- setup -----------------------------------------------------------------------------

    @staticmethod
    def _resolve_roots(folders: Sequence[str | os.PathLike[str]]) -> tuple[Path, ...]:
        resolved: list[Path] = []
        for folder in folders:
            path = Path(folder).expanduser().resolve()
            if path.is_dir() and path not in resolved:
                resolved.append(path)
        # A root inside another root would index the same files twice.
        return tuple(sorted(root for root in resolved
                            if not any(root != other and root.is_relative_to(other)
                                       for other in resolved)))

    @staticmethod
    def _root_labels(roots: tuple[Path, ...]) -> tuple[str, ...]:
        names = [root.name or str(root) for root in roots]
        return tuple(name if names.count(name) == 1 else str(root)
                     for name, root in zip(names, roots, strict=True))

    def _config_key(self) -> str:
        parts = [SCHEMA_VERSION, str(self.max_file_bytes), ",".join(sorted(self.extensions)),
                 *map(str, self.roots)]
        return hashlib.sha256("\n".join(parts).encode()).hexdigest()

    def _open(self, index_dir: str | os.PathLike[str] | None) -> sqlite3.Connection:
        location = ":memory:"
        if index_dir is not None:
            folder = Path(index_dir)
            folder.mkdir(parents=True, exist_ok=True)
            roots_key = hashlib.sha256("\n".join(map(str, self.roots)).encode()).hexdigest()
            location = str(folder / f"local-search-{roots_key[:16]}.sqlite3")
        for attempt in range(2):
            db = sqlite3.connect(location, check_same_thread=False)
            try:
                db = self._prepare(db)
            except sqlite3.DatabaseError:  # a corrupt index file: start over once
                db.close()
                if location == ":memory:" or attempt:
                    raise
                Path(location).unlink(missing_ok=True)
                continue
            if location != ":memory:" and os.name == "posix":
                os.chmod(location, 0o600)  # it holds the text of private files
            return db
        raise AssertionError("unreachable")

    def _prepare(self, db: sqlite3.Connection) -> sqlite3.Connection:
        db.execute("CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT)")
        row = db.execute("SELECT value FROM meta WHERE key = 'config'").fetchone()
        if row is None or row[0] != self._config_key():
            db.executescript("DROP TABLE IF EXISTS files; DROP TABLE IF EXISTS docs;")
        db.executescript("""
            CREATE TABLE IF NOT EXISTS files(
                id INTEGER PRIMARY KEY, root INTEGER NOT NULL, rel TEXT NOT NULL,
                mtime_ns INTEGER NOT NULL, size INTEGER NOT NULL, UNIQUE(root, rel));
            CREATE VIRTUAL TABLE IF NOT EXISTS docs USING fts5(
                name, body, tokenize = 'porter unicode61 remove_diacritics 2');
        """)
        db.execute("INSERT OR REPLACE INTO meta VALUES ('config', ?)", (self._config_key(),))
        db.commit()
        return db

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # -- indexing --------------------------------------------------------------------------

    def _walk(self, root: Path) -> Iterator[tuple[Path, os.stat_result]]:
        """Regular files with a text extension under `root`; symlinks never followed, hidden
        files and folders (".git", ".env.txt") and dependency folders left out."""
        for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
            here = Path(dirpath)
            dirnames[:] = sorted(
                name for name in dirnames
                if not name.startswith(".") and name not in SKIP_DIRS
                and not (here / name).is_symlink()
            )
            for name in sorted(filenames):
                if name.startswith(".") or Path(name).suffix.lower() not in self.extensions:
                    continue
                path = here / name
                try:
                    info = os.lstat(path)
                except OSError:
                    continue
                yield path, info

    def _inside(self, path: Path, root: Path) -> bool:
        try:
            return path.resolve(strict=True).is_relative_to(root)
        except (OSError, RuntimeError):  # vanished, or a symlink loop
            return False

    def _read(self, path: Path, root: Path) -> str | None:
        """The indexed text of one file, or None when it must be skipped."""
        if not self._inside(path, root):
            return None
        try:
            fd = os.open(path, _OPEN_FLAGS)
        except OSError:  # includes ELOOP: the file became a symlink since the walk
            return None
        with os.fdopen(fd, "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                return None
            data = handle.read(self.max_file_bytes)
        text = _decode(data)
        if text is not None and path.suffix.lower() in (".html", ".htm"):
            text = _html_to_text(text)
        return text

    def refresh(self, cancel: threading.Event | None = None) -> RefreshStats:
        """Bring the index up to date: new and changed files are read, gone ones dropped."""
        with self._lock:
            return self._refresh(cancel)

    def _refresh(self, cancel: threading.Event | None) -> RefreshStats:
        db = self._db
        known = {(root, rel): (file_id, mtime, size) for file_id, root, rel, mtime, size
                 in db.execute("SELECT id, root, rel, mtime_ns, size FROM files")}
        seen: set[int] = set()
        indexed = unchanged = skipped = 0
        with db:  # one transaction
            for root_id, root in enumerate(self.roots):
                for path, info in self._walk(root):
                    if cancel is not None and cancel.is_set():
                        break
                    if len(seen) >= self.max_files:
                        break
                    if not stat.S_ISREG(info.st_mode):  # symlinks, fifos, devices
                        skipped += 1
                        continue
                    rel = path.relative_to(root).as_posix()
                    old = known.get((root_id, rel))
                    if old and old[1] == info.st_mtime_ns and old[2] == info.st_size:
                        seen.add(old[0])
                        unchanged += 1
                        continue
                    text = self._read(path, root)
                    if text is None:
                        skipped += 1
                        continue
                    if old:
                        db.execute("DELETE FROM docs WHERE rowid = ?", (old[0],))
                        db.execute("UPDATE files SET mtime_ns = ?, size = ? WHERE id = ?",
                                   (info.st_mtime_ns, info.st_size, old[0]))
                        file_id = old[0]
                    else:
                        file_id = db.execute(
                            "INSERT INTO files(root, rel, mtime_ns, size) VALUES (?, ?, ?, ?)",
                            (root_id, rel, info.st_mtime_ns, info.st_size)).lastrowid
                    name = re.sub(r"[/._\-]+", " ", rel)
                    db.execute("INSERT INTO docs(rowid, name, body) VALUES (?, ?, ?)",
                               (file_id, name, text))
                    seen.add(file_id)
                    indexed += 1
            gone = [file_id for file_id, _, _ in known.values() if file_id not in seen]
            if cancel is None or not cancel.is_set():
                for file_id in gone:
                    db.execute("DELETE FROM docs WHERE rowid = ?", (file_id,))
                    db.execute("DELETE FROM files WHERE id = ?", (file_id,))
        if cancel is not None and cancel.is_set():
            return RefreshStats(indexed, unchanged, 0, skipped)  # partial: redo next time
        self._refreshed_at = time.monotonic()
        return RefreshStats(indexed, unchanged, len(gone), skipped)

    # -- searching -------------------------------------------------------------------------

    def search(self, query: str, limit: int = DEFAULT_RESULTS, folder: str | None = None,
               cancel: threading.Event | None = None) -> list[tuple[str, str]]:
        """[(display path, snippet)], best first. Raises ValueError for a bad query/folder."""
        terms = fts_query(query)
        if not terms:
            raise ValueError("the query has no words to search for")
        prefix = ""
        if folder:
            sub = safe_subfolder(folder)
            if sub.parts:
                if not any(self._inside_or_absent(root / sub, root) for root in self.roots):
                    raise ValueError("that folder is outside the chosen folders")
                prefix = sub.as_posix() + "/"
        with self._lock:
            stale = (self._refreshed_at is None
                     or time.monotonic() - self._refreshed_at > self.stale_after_s)
            if stale:
                self._refresh(cancel)
            hits: list[tuple[int, str, str]] = []
            found: set[int] = set()
            # Every word first (precise); then any word, to fill up (recall).
            for match in (" AND ".join(terms), " OR ".join(terms)):
                if len(hits) >= limit:
                    break
                rows = self._db.execute(
                    """SELECT files.id, files.root, files.rel,
                              snippet(docs, 1, '', '', '…', 24)
                       FROM docs JOIN files ON files.id = docs.rowid
                       WHERE docs MATCH ? AND substr(files.rel, 1, length(?)) = ?
                       ORDER BY bm25(docs, 4.0, 1.0) LIMIT ?""",
                    (match, prefix, prefix, limit)).fetchall()
                for file_id, root_id, rel, snippet in rows:
                    if file_id not in found and len(hits) < limit:
                        found.add(file_id)
                        hits.append((root_id, rel, re.sub(r"\s+", " ", snippet).strip()))
        return [(self._display(root_id, rel), snippet) for root_id, rel, snippet in hits]

    @staticmethod
    def _inside_or_absent(path: Path, root: Path) -> bool:
        try:
            return path.resolve().is_relative_to(root)
        except (OSError, RuntimeError):
            return False

    def _display(self, root_id: int, rel: str) -> str:
        return rel if len(self.roots) == 1 else f"{self._labels[root_id]}/{rel}"

    def run(self, arguments: Mapping[str, Any], cancel: threading.Event | None = None
            ) -> ToolResult:
        query = arguments.get("query")
        if not isinstance(query, str) or not query.strip():
            return self._error("'query' must be a non-empty string")
        folder = arguments.get("folder")
        if folder is not None and not isinstance(folder, str):
            return self._error("'folder' must be a string")
        count = arguments.get("max_results", DEFAULT_RESULTS)
        if isinstance(count, float) and count.is_integer():
            count = int(count)
        if isinstance(count, bool) or not isinstance(count, int):
            return self._error("'max_results' must be a whole number")
        if not self.roots:
            return self._error("no local folders are chosen (or none of them exists)")
        try:
            hits = self.search(query[:1000], min(max(count, 1), MAX_RESULTS), folder, cancel)
        except ValueError as exc:
            return self._error(str(exc))
        except sqlite3.Error as exc:
            return self._error(f"the local search index failed: {exc}")
        if not hits:
            return ToolResult(self.name, f"No local files match {query.strip()!r}.",
                              source="local files")
        lines = [f"Local files matching {query.strip()!r}:"]
        for number, (path, snippet) in enumerate(hits, start=1):
            lines.append(f"{number}. {path}")
            if snippet:
                lines.append(f"   {snippet}")
        return ToolResult(self.name, "\n".join(lines),
                          source="local files: " + ", ".join(path for path, _ in hits))

    def _error(self, message: str) -> ToolResult:
        return ToolResult(self.name, "", source="local files", error=message)
