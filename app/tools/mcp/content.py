"""What an MCP tool's result becomes for the LLM: text, with what is not text said in words.

A result is a list of content blocks. Text is kept as the server wrote it (untrusted: the
span injector sanitises whatever reaches the speech model). An image, audio or a binary
resource cannot be read by a text LLM nor spoken: it becomes one bracketed line that says
what it was and how large, so the LLM knows something came back. A result with no blocks but
structured content is that content as JSON. A result the server marks as an error is the
call's error.

A server may say in the result's `_meta` how long it scripted the call to take (our FDB v3
mock APIs do, `DECLARED_LATENCY_KEY`): a file's replay with a scripted LLM counts that time
instead of the machine's (docs/replay.md), and nothing else reads it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from mcp import types

ERROR_SHOWN = 400  # characters of a server's own error message kept
DECLARED_LATENCY_KEY = "contextspan/declared_latency_s"
MOST_DECLARED_S = 600.0  # a call's longest timeout


@dataclass(frozen=True)
class ReadResult:
    text: str
    error: str | None  # the server said the call failed (its words, cut)
    not_text: tuple[str, ...]  # what the result held that is not text, one phrase each
    declared_s: float | None = None  # the time the server scripted for the call


def declared_latency(result: types.CallToolResult) -> float | None:
    """The call's time as its server scripted it (0 to 600 s), or None when it said none."""
    meta = result.meta
    value = meta.get(DECLARED_LATENCY_KEY) if isinstance(meta, dict) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    seconds = float(value)
    return seconds if math.isfinite(seconds) and 0.0 <= seconds <= MOST_DECLARED_S else None


def _size(base64_data: str) -> str:
    """The decoded size of base64 data, in words."""
    size = len(base64_data) * 3 // 4
    if size >= 1024 * 1024:
        return f"{size / (1024 * 1024):.1f} MB"
    if size >= 1024:
        return f"{size / 1024:.0f} kB"
    return f"{size} bytes"


def _block_text(block: object) -> tuple[str, str | None]:
    """(text for the LLM, a phrase for `not_text` or None)."""
    if isinstance(block, types.TextContent):
        return block.text, None
    if isinstance(block, types.ImageContent):
        phrase = f"an image ({block.mime_type}, {_size(block.data)})"
        return f"[{phrase}: not readable as text]", phrase
    if isinstance(block, types.AudioContent):
        phrase = f"audio ({block.mime_type}, {_size(block.data)})"
        return f"[{phrase}: not readable as text]", phrase
    if isinstance(block, types.EmbeddedResource):
        resource = block.resource
        if isinstance(resource, types.TextResourceContents):
            return resource.text, None
        kind = getattr(resource, "mime_type", None) or "binary data"
        blob = getattr(resource, "blob", "") or ""
        phrase = f"a file {resource.uri} ({kind}, {_size(blob)})"
        return f"[{phrase}: not readable as text]", phrase
    if isinstance(block, types.ResourceLink):
        about = f": {block.description}" if block.description else ""
        return f"[a link to {block.name} at {block.uri}{about}]", None
    kind = getattr(block, "type", type(block).__name__)
    phrase = f"a {kind} block"
    return f"[{phrase}: not readable as text]", phrase


def read_result(result: types.CallToolResult) -> ReadResult:
    parts: list[str] = []
    not_text: list[str] = []
    for block in result.content:
        text, phrase = _block_text(block)
        parts.append(text)
        if phrase is not None:
            not_text.append(phrase)
    if not result.content and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    text = "\n".join(p for p in parts if p)
    declared = declared_latency(result)
    if result.is_error:
        message = " ".join(text.split())[:ERROR_SHOWN] or "the server gave no reason"
        return ReadResult("", f"the call failed: {message}", tuple(not_text), declared)
    return ReadResult(text, None, tuple(not_text), declared)
