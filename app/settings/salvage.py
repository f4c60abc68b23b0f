"""Reading what can be read of a settings file that is not valid JSON.

One bad byte (a disk error, a slip in a hand edit, a write cut short by another program) makes
`json.loads` refuse the whole file, and with it every setting the user chose. This reader
takes the same grammar but recovers at each member of an object: a member it cannot read is
skipped to the end of its line and noted, and reading goes on with the next line. The store
writes one setting per line (indent=2), so a bad byte costs the setting on its line, and a bad
byte on a group's own line or closing brace costs nothing more than that line: the line
structure (indentation) tells where the group's settings are, and is only consulted after an
error, so a file laid out some other way reads as JSON does.

A list that lost an item is left out (a list of tools missing one is not the user's choice),
but the items it read whole are handed to the store (`Salvage.cut_lists`), which keeps them
where each item stands alone (the MCP servers: a file cut inside the list keeps the servers
before the cut, and the notice names them).

Strings, numbers and literals are read by the json module's own decoder, so every value kept
is exactly what json.loads would have made of it. The store then checks each against the
schema as it checks a good file.

Why not fall back to a last good copy kept beside the file: the file is the newest word on
what the user wants (a hand edit, another window's save), and a copy would bring back values
they changed since; what cannot be read here comes from the defaults, and the notice names it.
"""

from __future__ import annotations

import bisect
import json
import re
from dataclasses import dataclass, field
from typing import Any

_MAX_DEPTH = 8  # the schema nests three deep (groups, their lists); deeper is not settings
_DECODER = json.JSONDecoder()
# Bytes that are not UTF-8 arrive as lone surrogates (surrogateescape); each becomes a NUL,
# which JSON refuses anywhere, so a bad byte is always an error at its own position.
_BAD_BYTE = re.compile("[\udc80-\udcff]")
_SPACE = " \t\r\n"
_NOT_SPACE = re.compile(r"[^ \t\r\n]")
_MEANINGFUL = re.compile(r'[\w"{}\[\]\-]')
_WINDOW = 4096  # characters given to json at once; a longer value gets its whole line
_MEMBER = re.compile(r'"(?:[^"\\\n]|\\.)*"\s*:')  # a line that starts `"name":`


@dataclass(frozen=True)
class Salvage:
    """What could be read: the root object's members, the lines skipped (1-based, in order)
    and whether the file ended before its objects were closed."""

    data: dict[str, Any]
    skipped_lines: tuple[int, ...]
    ended_early: bool
    # Groups read whose own name was lost (a bad byte in `"llm": {`): the store knows the
    # schema and gives each back to the group its settings belong to.
    unnamed_groups: tuple[dict[str, Any], ...] = ()
    # Lists that lost an item, left out of `data` (a list of names missing one is not the
    # user's list): by their path of member names, the items that were read whole, for
    # the store to keep where each item stands alone (the MCP servers).
    cut_lists: dict[tuple[str, ...], tuple[Any, ...]] = field(default_factory=dict)


def decode_leniently(data: bytes) -> str:
    """The file's text; bytes that are not UTF-8 become NUL characters (never valid JSON)."""
    text = data.decode("utf-8-sig", errors="surrogateescape")
    return _BAD_BYTE.sub("\0", text)


def salvage(text: str) -> Salvage:
    """The members of the file's root object that can be read (see the module docstring)."""
    reader = _Reader(text)
    data = reader.read_root()
    return Salvage(data, tuple(sorted(set(reader.skipped))), reader.ended_early,
                   tuple(reader.unnamed), dict(reader.cut_lists))


class _Unreadable(Exception):
    def __init__(self, position: int) -> None:
        super().__init__(position)
        self.position = position


class _Reader:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.skipped: list[int] = []
        self.ended_early = False
        self._damaged_list = False  # the list just read lost an item
        self._whole_items: list[Any] = []  # … and its items that were read whole
        self._path: list[str] = []  # the member names down to the value being read
        self.cut_lists: dict[tuple[str, ...], tuple[Any, ...]] = {}
        self.unnamed: list[dict[str, Any]] = []
        self._line_starts = [0] + [m.end() for m in re.finditer("\n", text)]

    # -- positions and lines -----------------------------------------------------------------

    def _skip_space(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos] in _SPACE:
            self.pos += 1

    def _line_of(self, position: int) -> int:
        return bisect.bisect_right(self._line_starts, position)

    def _line_start(self, position: int) -> int:
        return self._line_starts[self._line_of(position) - 1]

    def _line_end(self, position: int) -> int:
        """Where the line of `position` ends (its line break, or the end of the text)."""
        line = self._line_of(position)
        return self._line_starts[line] - 1 if line < len(self._line_starts) else len(self.text)

    def _indent_at(self, position: int) -> int:
        """The column of the line's first character that JSON means something by: a bad
        byte in the indentation does not move the line."""
        start = end = self._line_start(position)
        while end < len(self.text) and self.text[end] != "\n" and not _MEANINGFUL.match(
                self.text[end]):
            end += 1
        return end - start

    def _skip_line(self, position: int) -> None:
        """Note the line of `position` as unreadable and go on after it."""
        self.skipped.append(self._line_of(position))
        end = self.text.find("\n", position)
        self.pos = len(self.text) if end < 0 else end + 1

    def _next_line_deeper(self, position: int, indent: int) -> str | None:
        """After an unreadable line indented `indent`: "object" or "array" when the lines
        that follow are indented deeper (it opened a group or a list), else None."""
        end = self.text.find("\n", position)
        if end < 0:
            return None
        first = end + 1
        while first < len(self.text) and self.text[first] in _SPACE:
            first += 1
        if first >= len(self.text) or self._indent_at(first) <= indent:
            return None
        if _MEMBER.match(self.text, first):
            return "object"
        return "array"

    # -- values ------------------------------------------------------------------------------

    def read_root(self) -> dict[str, Any]:
        self._skip_space()
        if self.pos < len(self.text) and self.text[self.pos] == "{":
            self.pos += 1
        elif self.pos < len(self.text) and self.text[self.pos] != '"':
            self._skip_line(self.pos)  # the opening brace's line is unreadable
        # Without its opening brace the root is still read as a list of members.
        return self._object_body(depth=1, opener=-1, root=True)

    def _value(self, depth: int) -> Any:
        self._skip_space()
        if self.pos >= len(self.text):
            self.ended_early = True
            raise _Unreadable(self.pos)
        if depth > _MAX_DEPTH:
            raise _Unreadable(self.pos)
        char = self.text[self.pos]
        opener = self._indent_at(self.pos)
        if char == "{":
            self.pos += 1
            return self._object_body(depth + 1, opener)
        if char == "[":
            self.pos += 1
            return self._array_body(depth + 1, opener)
        value, self.pos = self._scalar()
        return value

    def _scalar(self) -> tuple[Any, int]:
        """A string, number or literal at `pos` and where it ends, read by json itself. It
        lies within one line (JSON refuses a line break in a string), and json is given only
        that line: its error message counts the lines before the error, which over a whole
        file with many broken lines would take time with the square of the file's size."""
        end = self._line_end(self.pos)
        # First a window of the line (a one-line file may hold every setting), then, when
        # the value may go on past it, the whole line.
        for stop in dict.fromkeys((min(end, self.pos + _WINDOW), end)):
            try:
                value, used = _DECODER.raw_decode(self.text[self.pos:stop])
            except ValueError as exc:  # JSONDecodeError, or an integer too long to convert
                if stop == end:
                    raise _Unreadable(self.pos + getattr(exc, "pos", 0)) from None
                continue
            if self.pos + used < stop or stop == end:
                return value, self.pos + used
        raise AssertionError("unreachable: the whole line was read")

    def _ends_here(self, recovering: bool, opener: int, opened_line: int) -> bool:
        """After a skipped line, a line indented no deeper than the one that opened this
        object or list is past its end: its closing bracket was the line lost."""
        return (recovering and opener >= 0 and self._line_of(self.pos) != opened_line
                and self._indent_at(self.pos) <= opener)

    def _object_body(self, depth: int, opener: int, root: bool = False) -> dict[str, Any]:
        members: dict[str, Any] = {}
        opened_line = self._line_of(self.pos)
        recovering = False
        member_indent: int | None = None  # of the members on lines of their own
        while True:
            self._skip_space()
            if self.pos >= len(self.text):
                self.ended_early = True
                return members
            if self._ends_here(recovering, opener, opened_line):
                return members
            char = self.text[self.pos]
            if char == "}":
                self.pos += 1
                if root and _NOT_SPACE.search(self.text, self.pos):
                    self._skip_line(self.pos - 1)  # a stray brace: the members go on
                    recovering = True
                    continue
                return members
            if char == ",":
                self.pos += 1
                continue
            start = self.pos
            if member_indent is None and self._line_of(start) != opened_line:
                member_indent = self._indent_at(start)
            key: str | None = None
            try:
                key, self.pos = self._key()
                self._skip_space()
                if self.text[self.pos:self.pos + 1] != ":":
                    raise _Unreadable(self.pos)
                self.pos += 1
                self._path.append(key)
                try:
                    value = self._value(depth)
                finally:
                    self._path.pop()
                if self._damaged_list:  # a list missing an item is not the user's list
                    self._damaged_list = False
                    self.skipped.append(self._line_of(start))
                    self.cut_lists[tuple(self._path) + (key,)] = tuple(self._whole_items)
                else:
                    members[key] = value
                recovering = False
            except _Unreadable as exc:
                at = max(exc.position, start)
                indent = self._indent_at(start) if member_indent is None else member_indent
                # On the line that opened this object, the deeper lines are its own members.
                shape = (None if self._line_of(at) == opened_line or depth >= _MAX_DEPTH
                         else self._next_line_deeper(at, indent))
                self._skip_line(at)
                recovering = True
                if shape is not None:  # the lost line opened a group or a list: read it
                    body = (self._object_body(depth + 1, indent) if shape == "object"
                            else self._array_body(depth + 1, indent))
                    damaged, self._damaged_list = self._damaged_list, False
                    if key is not None and not damaged:
                        members[key] = body
                    elif isinstance(body, dict) and body:
                        self.unnamed.append(body)

    def _key(self) -> tuple[str, int]:
        if self.text[self.pos] != '"':
            raise _Unreadable(self.pos)
        return self._scalar()

    def _array_body(self, depth: int, opener: int) -> list[Any]:
        items: list[Any] = []
        whole: list[Any] = []  # the items read with nothing skipped in them
        opened_line = self._line_of(self.pos)
        recovering = recovering_once = False
        self._path.append("[]")
        try:
            while True:
                self._skip_space()
                if self.pos >= len(self.text):
                    self.ended_early = self._damaged_list = True
                    break
                if self._ends_here(recovering, opener, opened_line):
                    self._damaged_list = True
                    break
                char = self.text[self.pos]
                if char == "]":
                    self.pos += 1
                    self._damaged_list = self._damaged_list or recovering_once
                    break
                if char == ",":
                    self.pos += 1
                    continue
                start = self.pos
                skipped, ended = len(self.skipped), self.ended_early
                try:
                    item = self._value(depth)
                    items.append(item)
                    if len(self.skipped) == skipped and self.ended_early == ended \
                            and not self._damaged_list:
                        whole.append(item)
                    recovering = False
                except _Unreadable as exc:
                    self._skip_line(max(exc.position, start))
                    recovering = recovering_once = True
        finally:
            self._path.pop()
        self._whole_items = whole
        return items
