"""Read one web page as plain text, so the LLM (and the voice) can quote the real thing.

Guards, because the URL comes from an LLM that may have read a hostile page: http and https
only; local and private addresses refused unless allowed (a prompt injection must not make
the assistant probe the user's router or local services); every redirect hop re-checked;
the body read as a stream and cut at `max_bytes`; one overall deadline. The page text is
untrusted data and is returned as content only.

A host name is judged by what it resolves to: every address of the answer must be public,
and the connection goes to one of the checked addresses (the request is sent to the IP,
with the name kept in the Host header and in TLS, where the certificate is verified against
it). The name is never looked up a second time, so a DNS answer that changes between the
check and the connection (DNS rebinding) cannot lead the fetch inside. Environment proxies
are not used: a proxy resolves names itself, out of reach of the check.
"""

from __future__ import annotations

import ipaddress
import re
import socket
import ssl
import threading
import time
from collections.abc import Mapping
from typing import Any

import httpx

from app.cuts import Cut
from app.tools.base import Tool, ToolResult, limit_text

DEFAULT_MAX_BYTES = 2_000_000
DEFAULT_MAX_CHARS = 20_000
MAX_URL_CHARS = 2048
USER_AGENT = "Mozilla/5.0 (compatible; ContextSpan/0.1; desktop voice assistant)"
_HTML_TYPES = ("text/html", "application/xhtml+xml")
_TEXT_TYPES = ("application/json", "application/xml", "application/javascript")


class FetchError(RuntimeError):
    """A fetch failure with a one-line message for the LLM."""


IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")  # IPv6-only networks reach IPv4 hosts here


def is_public_address(address: IPAddress) -> bool:
    """A globally routable unicast address. An IPv6 address that stands for an IPv4 host
    (IPv4-mapped, NAT64, 6to4) is judged by that IPv4 address too."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = address.ipv4_mapped
        if embedded is None and address in _NAT64:
            embedded = ipaddress.IPv4Address(int(address) & 0xFFFF_FFFF)
        if embedded is not None:
            return is_public_address(embedded)
        if address.sixtofour is not None and not is_public_address(address.sixtofour):
            return False
        if address.is_site_local:
            return False
    return address.is_global and not (
        address.is_private or address.is_loopback or address.is_link_local
        or address.is_multicast or address.is_reserved or address.is_unspecified)


def _literal_address(host: str) -> IPAddress | None:
    """The address a host written as an IP stands for, legacy IPv4 spellings included
    ("127.1", "2130706433", "0x7f.1": the resolver reads them so)."""
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    try:
        return ipaddress.IPv4Address(socket.inet_aton(host))
    except (OSError, ValueError):
        return None


def _resolve(host: str, port: int) -> list[IPAddress]:
    """Every address `host` stands for, in the resolver's order (a literal IP: itself)."""
    literal = _literal_address(host)
    if literal is not None:
        return [literal]
    try:
        answers = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise FetchError(f"cannot resolve {host}: {_one_line(str(exc))[:160]}") from exc
    addresses: list[IPAddress] = []
    for family, _type, _proto, _name, sockaddr in answers:
        if family not in (socket.AF_INET, socket.AF_INET6):
            continue
        address = ipaddress.ip_address(sockaddr[0])
        if address not in addresses:
            addresses.append(address)
    if not addresses:
        raise FetchError(f"cannot resolve {host}: no IP address")
    return addresses


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
                 allow_private_hosts: bool = False, user_agent: str = USER_AGENT,
                 verify: ssl.SSLContext | bool = True) -> None:
        """`verify`: httpx's certificate check (an SSLContext to trust other roots)."""
        self.timeout_s = timeout_s
        self.max_bytes = max_bytes
        self.max_chars = max_chars
        self.max_redirects = max_redirects
        self.allow_private_hosts = allow_private_hosts
        self.user_agent = user_agent
        self.verify = verify

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
        page_chars = len(text)
        text, clipped = limit_text(text, self.max_chars)
        cuts: tuple[Cut, ...] = ()
        if cut:  # the download stopped at its bound: how much more there was is unknown
            cuts += (Cut("the page", None, self.max_bytes, "bytes",
                         f"web_fetch downloads at most {self.max_bytes:,} bytes of a page"),)
        if clipped:
            cuts += (Cut("the page's text", page_chars, len(text), "characters",
                         f"web_fetch keeps {self.max_chars:,} characters of a page"),)
        if title and not text.startswith(title):
            text = f"{title}\n\n{text}"
        return ToolResult(self.name, text, source=str(final_url), truncated=cut or clipped,
                          cuts=cuts)

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
        return url

    def _addresses(self, url: httpx.URL) -> list[IPAddress]:
        """The checked addresses to connect to for `url`: all of them public, unless
        private hosts are allowed."""
        host = url.raw_host.decode("ascii")
        addresses = _resolve(host, url.port or (443 if url.scheme == "https" else 80))
        if not self.allow_private_hosts:
            for address in addresses:
                if not is_public_address(address):
                    named = "" if str(address) == host else f"{host} is "
                    raise FetchError(
                        f"refusing to fetch a local or private address ({named}{address})")
        return addresses

    def _send(self, client: httpx.Client, url: httpx.URL, addresses: list[IPAddress],
              deadline: float) -> httpx.Response:
        """GET `url` from the first checked address that takes the connection (the next
        one is tried when one refuses, while time is left). The request goes to the IP;
        the Host header and the TLS name (SNI and certificate check) stay the host's."""
        host = url.raw_host.decode("ascii")
        *others, last = addresses
        for address in others:
            try:
                return client.send(self._pinned(client, url, host, address), stream=True)
            except httpx.ConnectError:
                if time.monotonic() > deadline:
                    raise
        return client.send(self._pinned(client, url, host, last), stream=True)

    @staticmethod
    def _pinned(client: httpx.Client, url: httpx.URL, host: str, address: IPAddress
                ) -> httpx.Request:
        try:
            pinned = url.copy_with(host=str(address))
        except httpx.InvalidURL as exc:  # e.g. a link-local address with a zone
            raise FetchError(f"cannot connect to {host} at {address}") from exc
        return client.build_request("GET", pinned, headers={"Host": url.netloc.decode("ascii")},
                                    extensions={"sni_hostname": host})

    def _download(self, url: httpx.URL, cancel: threading.Event | None
                  ) -> tuple[httpx.URL, str, str | None, bytes, bool]:
        """GET with redirects followed by hand (each hop checked), the body cut at
        `max_bytes`, and one deadline for the whole fetch."""
        deadline = time.monotonic() + self.timeout_s
        headers = {"User-Agent": self.user_agent,
                   "Accept": "text/html,application/xhtml+xml,text/plain;q=0.9,*/*;q=0.5"}
        try:
            with httpx.Client(timeout=httpx.Timeout(self.timeout_s), headers=headers,
                              follow_redirects=False, trust_env=False,
                              verify=self.verify) as client:
                for _hop in range(self.max_redirects + 1):
                    if cancel is not None and cancel.is_set():
                        raise FetchError("cancelled")
                    addresses = self._addresses(url)
                    response = self._send(client, url, addresses, deadline)
                    try:
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
                    finally:
                        response.close()
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

