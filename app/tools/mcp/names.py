"""The names the LLM calls MCP tools by: unique across servers and beside the built-in tools.

A tool keeps its own name when no built-in tool and no other server's tool has it (the name
its server chose is the one its description was written for, and the one a benchmark
scores). Where two would share a name, each becomes "<server>__<tool>". The LLM APIs accept
letters, digits, "_" and "-", 64 at most (OpenAI's rule, the strictest): anything else
becomes "_". A name that is still taken gets "_2", "_3"...
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Collection, Sequence

MAX_NAME = 64
_NOT_ALLOWED = re.compile(r"[^A-Za-z0-9_-]")


def wire_name(text: str) -> str:
    """`text` as a name every LLM API takes."""
    name = _NOT_ALLOWED.sub("_", text.strip())[:MAX_NAME]
    return name or "tool"


def assign_names(tools: Sequence[tuple[str, str]], reserved: Collection[str] = ()
                 ) -> dict[tuple[str, str], str]:
    """(server, tool) -> the name the LLM sees, for `tools` in the servers' order;
    `reserved`: the built-in tools' names."""
    taken = set(reserved)
    bare = Counter(wire_name(tool) for _, tool in tools)
    names: dict[tuple[str, str], str] = {}
    for server, tool in tools:
        name = wire_name(tool)
        if name in taken or bare[name] > 1:
            name = wire_name(f"{server}__{tool}")
        candidate, n = name, 2
        while candidate in taken:
            suffix = f"_{n}"
            candidate = name[: MAX_NAME - len(suffix)] + suffix
            n += 1
        taken.add(candidate)
        names[(server, tool)] = candidate
    return names
