"""An httpx transport that keeps an NDJSON stream's lines where the server put them.

Ollama streams one JSON object per line, separated by "\\n" only. Its JSON leaves some
characters raw inside strings: U+0085 (NEXT LINE) among them. The `ollama` client reads the
stream with httpx's `iter_lines`, which splits like `str.splitlines` — at U+0085, U+2028
and U+2029 too — so an answer containing one is cut in two, neither half is JSON, and the
turn fails as "malformed". Inside JSON these characters can only be in strings, where the
escape "\\u0085" means exactly the same character: this transport rewrites their raw UTF-8
bytes to that escape as the body streams in, so every line the client sees is whole.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx

# UTF-8 bytes of the characters str.splitlines splits at (beyond ASCII controls, which
# JSON never carries raw) -> their JSON escape.
_ESCAPES = {
    b"\xc2\x85": b"\\u0085",
    b"\xe2\x80\xa8": b"\\u2028",
    b"\xe2\x80\xa9": b"\\u2029",
}
_LEADS = (b"\xc2", b"\xe2", b"\xe2\x80")  # a chunk ending here may continue into the next


def escape_line_separators(chunks: Iterator[bytes]) -> Iterator[bytes]:
    """The same bytes with the separators escaped, correct across chunk boundaries."""
    carry = b""
    for chunk in chunks:
        data = carry + chunk
        carry = b""
        for lead in sorted(_LEADS, key=len, reverse=True):
            if data.endswith(lead):
                data, carry = data[: -len(lead)], lead
                break
        for raw, escaped in _ESCAPES.items():
            data = data.replace(raw, escaped)
        if data:
            yield data
    if carry:
        yield carry


class _EscapingStream(httpx.SyncByteStream):
    def __init__(self, inner: httpx.SyncByteStream) -> None:
        self._inner = inner

    def __iter__(self) -> Iterator[bytes]:
        yield from escape_line_separators(iter(self._inner))

    def close(self) -> None:
        self._inner.close()


class LineSeparatorSafeTransport(httpx.BaseTransport):
    def __init__(self, inner: httpx.BaseTransport) -> None:
        self._inner = inner

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self._inner.handle_request(request)
        if response.headers.get("content-encoding", "identity") != "identity":
            return response  # compressed bytes are not text: leave them alone
        headers = [(k, v) for k, v in response.headers.multi_items()
                   if k.lower() != "content-length"]  # the escapes change the length
        stream = response.stream
        assert isinstance(stream, httpx.SyncByteStream)  # what a sync transport returns
        return httpx.Response(response.status_code, headers=headers,
                              stream=_EscapingStream(stream),
                              extensions=response.extensions, request=request)

    def close(self) -> None:
        self._inner.close()
