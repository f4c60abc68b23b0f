"""Text that is content, written into Markdown so that it reads as the text it is.

What the model says, what the user typed, a dropped file and a tool's output are not
Markdown: a line of theirs that starts with ">" would read as one of the export's spans, one
with "#" as a heading, "**" as bold, "<b>" as HTML, "| a | b |" as a table. CommonMark lets
any ASCII punctuation be escaped with a backslash, so the characters that can mean something
are escaped where they can (markers that only count at a line's start, only there),
indentation, which cannot be escaped, is kept as no-break spaces (four spaces would make a
code block), and each line break stays one.
"""

from __future__ import annotations

import re

# Punctuation with a meaning anywhere in a line: emphasis, code, links, GFM tables and
# strikethrough; "<" only where HTML or an autolink could start (not in the `<U+202E>` that
# shows a bidi control), "&" only where an entity could, "_" only where it could emphasise
# (never inside a word: `web_fetch` stays as it is). What is escaped stays readable in the
# file: a backslash before it.
_ANYWHERE = re.compile(r"[\\`*\[\]|~]|&(?=[A-Za-z#])|(?<![^\W_])_|_(?![^\W_])"
                       r"|<(?=[/!?]|[A-Za-z][A-Za-z0-9-]*(?:[\s/>]|$)"  # a tag
                       r"|[A-Za-z][A-Za-z0-9+.-]{1,31}:)")  # an autolink's scheme
# Markers that count only at the start of a line: quotes, headings, list items, setext
# underlines.
_AT_START = re.compile(r"[>#+\-=]")
_ORDERED = re.compile(r"(\d{1,9})([.)])")  # "1." or "1)" starts an ordered list
_INDENT = re.compile(r"[ \t]+")
NO_BREAK_SPACE = "\u00a0"


def escape_line(line: str) -> str:
    indent = _INDENT.match(line)
    lead = ""
    if indent is not None:
        lead = indent.group().replace("\t", "    ").replace(" ", NO_BREAK_SPACE)
        line = line[indent.end():]
    line = _ANYWHERE.sub(lambda found: "\\" + found.group(), line)
    if _AT_START.match(line):
        line = "\\" + line
    else:
        line = _ORDERED.sub(r"\1\\\2", line, count=1) if _ORDERED.match(line) else line
    return lead + line


def escape_markdown(text: str) -> str:
    """`text` as literal Markdown: it renders as itself, line for line (a line followed by
    another ends with a backslash, CommonMark's hard line break; an empty line still
    parts two paragraphs)."""
    lines = [escape_line(line.rstrip("\r")) for line in text.split("\n")]
    return "\n".join(line + "\\" if line.strip() and following.strip() else line
                     for line, following in zip(lines, [*lines[1:], ""], strict=True))


def code_span(text: str) -> str:
    """`text` as one inline code span: fenced by more backticks than any run inside it, and
    on one line (a line break inside a code span reads as a space anyway)."""
    flat = " ".join(text.splitlines())
    longest = max((len(run) for run in re.findall("`+", flat)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if flat.startswith("`") or flat.endswith("`") or not flat.strip() else ""
    return f"{fence}{pad}{flat}{pad}{fence}"
