"""Read one web page as plain text, so the LLM (and the voice) can quote the real thing.

Guards, because the URL comes from an LLM that may have read a hostile page: http and https
only; local and private addresses refused unless allowed (a prompt injection must not make
the assistant probe the user's router or local services); every redirect hop re-checked;
the body read as a stream and cut at `max_bytes`; one overall deadline. The page text is
untrusted data and is returned as content only.
"""

from __future__ import annotations

import ipaddress
import re
import socket
import threading
import time
from collections.abc import Mapping
from typing import Any

import httpx

from app.tools.base import Tool, ToolResult, limit_text

DEFAULT_MAX_BYTES = 2_000_000
DEFAULT_MAX_CHARS = 20_000
MAX_URL_CHARS = 2048
USER_AGENT = "Mozilla/5.0 (compatible; ContextSpan/0.1; desktop voice assistant)"
_HTML_TYPES = ("text/html", "application/xhtml+xml")
_TEXT_TYPES = ("application/json", "application/xml", "application/javascript")


class FetchError(RuntimeError):
    """A fetch failure with a one-line message for the LLM."""


def _is_private_host(host: str) -> bool:
    """Literal local/private addresses and localhost names. Names that resolve to private
    addresses are not caught (that needs resolving, and DNS can change between checks)."""
    host = host.strip("[]").lower().rstrip(".")
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        try:  # legacy IPv4 spellings the resolver accepts: "127.1", "2130706433", "0x7f.1"
            address = ipaddress.IPv4Address(socket.inet_aton(host))
        except (OSError, ValueError):
            return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        address = address.ipv4_mapped
    return not address.is_global or address.is_multicast


def _one_line(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


class WebFetchTool(Tool):
    """Fetches a page and extracts its readable text with trafilatura."""

    name = "web_fetch"
    description = (
        "Fetch a web page (http or https URL) and return its readable text, without menus "
        "and ads. Use it to read a result found with web_search or a URL the user gave."
    )
    parameters: Mapping[str, Any] = {
        "type": "object",
        "properties": {
            "url": {"type": "string", "description": "The full http(s) URL of the page"},
        },
        "required": ["url"],
    }

    def __init__(self, timeout_s: float = 10.0, max_bytes: int = DEFAULT_MAX_BYTES,
                 max_chars: int = DEFAULT_MAX_CHARS, max_redirects: int = 5,
                 allow_private_hosts: bool = False, user_agent: str = USER_AGENT) -> None:
        self.timeout_s = timeout_s
        self.max_bytes = max_bytes
        self.max_chars = max_chars
        self.max_redirects = max_redirects
        self.allow_private_hosts = allow_private_hosts
        self.user_agent = user_agent

    def run(self, arguments: Mapping[str, Any], cancel: threading.Event | None = None
            ) -> ToolResult:
        raw = arguments.get("url")
        if not isinstance(raw, str) or not raw.strip():
            return self._error("'url' must be a non-empty string", "")
        raw = raw.strip()
        try:
            url = self._check_url(raw)
            final_url, content_type, charset, body, cut = self._download(url, cancel)
            title, text = self._readable(final_url, content_type, charset, body)
        except FetchError as exc:
            return self._error(str(exc), raw)
        text, clipped = limit_text(text, self.max_chars)
        if title and not text.startswith(title):
            text = f"{title}\n\n{text}"
        return ToolResult(self.name, text, source=str(final_url), truncated=cut or clipped)

    # -- steps -----------------------------------------------------------------------------

    def _check_url(self, raw: str | httpx.URL) -> httpx.URL:
        if isinstance(raw, str) and len(raw) > MAX_URL_CHARS:
            raise FetchError("the URL is too long")
        try:
            url = httpx.URL(raw)
        except (httpx.InvalidURL, TypeError, ValueError) as exc:
            raise FetchError(f"not a valid URL: {_one_line(str(raw))[:200]!r}") from exc
        if url.scheme not in ("http", "https"):
            scheme = url.scheme or "no scheme"
            raise FetchError(f"only http and https URLs can be fetched (got {scheme})")
        if not url.host:
            raise FetchError("the URL has no host")
        if not self.allow_private_hosts and _is_private_host(url.host):
            raise FetchError(f"refusing to fetch a local or private address ({url.host})")
        return url

    def _download(self, url: httpx.URL, cancel: threading.Event | None
                  ) -> tuple[httpx.URL, str, str | None, bytes, bool]:
        """GET with redirects followed by hand (each hop checked), the body cut at
        `max_bytes`, and one deadline for the whole fetch."""
        deadline = time.monotonic() + self.timeout_s
        headers = {"User-Agent": self.user_agent,
                   "Accept": "text/html,application/xhtml+xml,text/plain;q=0.9,*/*;q=0.5"}
        try:
            with httpx.Client(timeout=httpx.Timeout(self.timeout_s), headers=headers,
                              follow_redirects=False) as client:
                for _hop in range(self.max_redirects + 1):
                    with client.stream("GET", url) as response:
                        if response.is_redirect:
                            location = response.headers.get("location", "")
                            url = self._check_url(url.join(location))
                            continue
                        if response.status_code >= 400:
                            reason = response.reason_phrase or ""
                            raise FetchError(f"HTTP {response.status_code} {reason}".strip()
                                             + f" for {url}")
                        content_type = response.headers.get("content-type", "")
                        content_type = content_type.split(";")[0].strip().lower()
                        body, cut = self._read_capped(response, deadline, cancel)
                        return url, content_type, response.charset_encoding, body, cut
                raise FetchError(f"too many redirects (more than {self.max_redirects})")
        except httpx.TimeoutException as exc:
            raise FetchError(f"timed out after {self.timeout_s:g} s fetching {url.host}"
                             ) from exc
        except httpx.ConnectError as exc:
            raise FetchError(f"cannot connect to {url.host}: {_one_line(str(exc))[:160]}"
                             ) from exc
        except httpx.HTTPError as exc:
            raise FetchError(f"fetch failed: {type(exc).__name__}: "
                             f"{_one_line(str(exc))[:160]}") from exc

    def _read_capped(self, response: httpx.Response, deadline: float,
                     cancel: threading.Event | None) -> tuple[bytes, bool]:
        chunks: list[bytes] = []
        size = 0
        for chunk in response.iter_bytes():
            if cancel is not None and cancel.is_set():
                raise FetchError("cancelled")
            room = self.max_bytes - size
            chunks.append(chunk[:room])
            size += min(len(chunk), room)
            if len(chunk) >= room or time.monotonic() > deadline:
                return b"".join(chunks), True
        return b"".join(chunks), False

    def _readable(self, url: httpx.URL, content_type: str, charset: str | None,
                  body: bytes) -> tuple[str, str]:
        """(title, text). HTML goes through trafilatura; text types are decoded as-is."""
        looks_html = body.lstrip()[:15].lower().startswith((b"<!doctype html", b"<html"))
        if content_type in _HTML_TYPES or (not content_type and looks_html):
            return self._from_html(url, charset, body)
        if content_type.startswith("text/") or content_type in _TEXT_TYPES \
                or content_type.endswith(("+json", "+xml")):
            text = body.decode(charset or "utf-8", errors="replace").strip()
            if not text:
                raise FetchError(f"{url} is empty")
            return "", text
        raise FetchError(f"cannot read {content_type or 'unknown'} content from {url} "
                         "(only web pages and plain text)")

    def _from_html(self, url: httpx.URL, charset: str | None, body: bytes) -> tuple[str, str]:
        import trafilatura  # imported late: it is slow to import

        page: str | bytes = body
        if charset:
            try:
                page = body.decode(charset, errors="replace")
            except LookupError:  # an unknown charset name: let trafilatura guess
                page = body
        document = trafilatura.bare_extraction(page, url=str(url), include_comments=False,
                                               include_tables=True, with_metadata=True)
        text = (getattr(document, "text", None) or "").strip()
        if not text:
            raise FetchError(f"no readable text found at {url}")
        return _one_line(getattr(document, "title", None) or ""), text

    def _error(self, message: str, source: str) -> ToolResult:
        return ToolResult(self.name, "", source=source, error=message)

