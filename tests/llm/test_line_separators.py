"""Answers that contain U+0085 (NEXT LINE), U+2028 or U+2029 arrive whole: Ollama sends the
first raw inside its JSON strings, and a client that split lines like str.splitlines would
cut the line in two and fail the turn as "malformed"."""

from __future__ import annotations

import json

import pytest

from app.llm.backend import ChatMessage
from app.llm.ndjson_safe_transport import escape_line_separators
from app.llm.ollama_backend import OllamaBackend, OllamaSettings
from app.llm.ollama_standin import OllamaStandIn, ScriptedReply

ODD = "first\u0085second \u2028third\u2029 fourth"


@pytest.mark.parametrize("chunk_chars", [1, 3, 64])
def test_an_answer_with_unicode_line_separators_arrives_whole(chunk_chars):
    with OllamaStandIn(script=[ScriptedReply(content=ODD, chunk_chars=chunk_chars)]) as server:
        backend = OllamaBackend(OllamaSettings(host=server.url, model="standin:latest"))
        try:
            result = backend.chat([ChatMessage("user", "hello")])
        finally:
            backend.close()
    assert result.content == ODD


def test_the_stand_in_writes_u0085_raw_like_ollama():
    """Otherwise the test above would pass without the fix."""
    from app.llm.ollama_standin import _ndjson

    line = _ndjson({"content": ODD})
    assert b"\xc2\x85" in line and b"\\u2028" in line
    assert json.loads(line)["content"] == ODD


def test_escaping_holds_across_chunk_boundaries():
    raw = ('{"content": "' + ODD + '"}\n').encode()
    for size in range(1, 8):
        chunks = [raw[i : i + size] for i in range(0, len(raw), size)]
        escaped = b"".join(escape_line_separators(iter(chunks)))
        assert escaped.decode().splitlines() == [escaped.decode().rstrip("\n")]
        assert json.loads(escaped)["content"] == ODD
