"""web_fetch against a real HTTP server on 127.0.0.1, with a fake DNS for host names."""

from __future__ import annotations

import ipaddress
import socket
import ssl
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from app.tools import web_fetch
from app.tools.web_fetch import WebFetchTool

PUBLIC_IP = "93.184.216.34"  # a global address; the test guard refuses to connect to it

# A self-signed certificate for the name "intranet.test" only (valid until 2126), made with
#   openssl req -x509 -newkey rsa:2048 -nodes -days 36500 -subj /CN=intranet.test \
#     -addext subjectAltName=DNS:intranet.test
TLS_DIR = Path(__file__).parent / "tls"
TLS_CERT = TLS_DIR / "intranet_test_cert.pem"
TLS_KEY = TLS_DIR / "intranet_test_key.pem"
TLS_NAME = "intranet.test"


class FakeDns:
    """Answers for made-up names (one list of addresses per lookup, the last one repeats),
    and every lookup made, names and addresses alike: the connection to an address also
    passes through getaddrinfo, so `lookups` shows where each connection went."""

    def __init__(self, real: Callable[..., list]) -> None:
        self._real = real
        self.answers: dict[str, list[list[str]]] = {}
        self.lookups: list[str] = []

    def add(self, name: str, *answers: list[str]) -> None:
        self.answers[name] = list(answers)

    def getaddrinfo(self, host: object, port: object, *args: object, **kwargs: object
                    ) -> list:
        self.lookups.append(str(host))
        answers = self.answers.get(str(host))
        if answers is None:
            return self._real(host, port, *args, **kwargs)
        addresses = answers.pop(0) if len(answers) > 1 else answers[0]
        number = int(port) if port is not None else 0
        return [(socket.AF_INET6, socket.SOCK_STREAM, 6, "", (a, number, 0, 0))
                if ":" in a else (socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, number))
                for a in addresses]

    def count(self, host: str) -> int:
        return self.lookups.count(host)


class _HostEcho(BaseHTTPRequestHandler):
    """Answers every GET with the Host header it received."""

    protocol_version = "HTTP/1.0"

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        body = f"host={self.headers.get('Host')}".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@dataclass
class TlsServer:
    port: int
    sni_names: list[str | None] = field(default_factory=list)  # one per TLS hello


@pytest.fixture()
def tls_web_server() -> Iterator[TlsServer]:
    """An https server on 127.0.0.1 with the certificate of intranet.test; it records the
    name each client asked for in its TLS hello."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(TLS_CERT, TLS_KEY)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _HostEcho)
    server.daemon_threads = True
    info = TlsServer(server.server_address[1])
    context.sni_callback = lambda _sock, name, _context: info.sni_names.append(name)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    try:
        yield info
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.fixture()
def fake_dns(monkeypatch: pytest.MonkeyPatch) -> FakeDns:
    """Installed over the test guard's getaddrinfo: unknown names still fail loudly."""
    dns = FakeDns(socket.getaddrinfo)
    monkeypatch.setattr(socket, "getaddrinfo", dns.getaddrinfo)
    return dns


def local_fetcher(**kwargs: object) -> WebFetchTool:
    return WebFetchTool(allow_private_hosts=True, **{"timeout_s": 5.0, **kwargs})


def test_article_text_is_extracted_without_boilerplate(web_server: str) -> None:
    result = local_fetcher().run({"url": f"{web_server}/article"})
    assert result.ok, result.error
    assert "Otters of the Baltic" in result.content
    assert "four thousand otters along the Polish coast" in result.content
    assert "Subscribe to our newsletter" not in result.content
    assert "Cookie policy" not in result.content
    assert "<p>" not in result.content
    assert result.source == f"{web_server}/article"
    assert not result.truncated


def test_redirect_is_followed_and_source_is_the_final_url(web_server: str) -> None:
    result = local_fetcher().run({"url": f"{web_server}/redirect"})
    assert result.ok, result.error
    assert "Polish coast" in result.content
    assert result.source == f"{web_server}/article"


def test_redirect_loop_and_redirect_to_file_scheme_are_errors(web_server: str) -> None:
    loop = local_fetcher(max_redirects=3).run({"url": f"{web_server}/loop"})
    assert not loop.ok and "redirect" in loop.error
    to_file = local_fetcher().run({"url": f"{web_server}/to-file"})
    assert not to_file.ok and "http and https" in to_file.error
    assert to_file.content == ""


def test_missing_page_is_an_error(web_server: str) -> None:
    result = local_fetcher().run({"url": f"{web_server}/nope"})
    assert not result.ok
    assert "404" in result.error


def test_plain_text_is_returned_and_binary_content_refused(web_server: str) -> None:
    plain = local_fetcher().run({"url": f"{web_server}/plain"})
    assert plain.ok and plain.content == "Plain notes: the kettle is blue."
    image = local_fetcher().run({"url": f"{web_server}/image"})
    assert not image.ok and "image/png" in image.error


def test_huge_body_is_cut_off(web_server: str) -> None:
    result = local_fetcher(max_bytes=200_000, max_chars=1_000_000).run(
        {"url": f"{web_server}/huge"})
    assert result.ok, result.error
    assert result.truncated
    assert 150_000 < len(result.content) <= 200_000
    assert result.content.startswith("all work and no play")


@pytest.mark.parametrize("url", [
    "file:///etc/passwd", "FILE:///etc/passwd", "File://site.test/etc/passwd",
    "data:text/plain,hello", "ftp://site.test/x", "FTP://site.test/x", "ftps://site.test/x",
    "javascript:alert(1)", "gopher://site.test/", "ws://site.test/", "wss://site.test/",
    "//site.test/scheme-relative", "/relative/path", "site.test/no-scheme",
    "not a url at all",
])
def test_only_http_and_https_schemes_are_fetched(url: str, fake_dns: FakeDns) -> None:
    """Refused before anything is looked up: site.test would resolve, so a scheme that
    slipped through would show as a lookup."""
    fake_dns.add("site.test", [PUBLIC_IP])
    result = WebFetchTool().run({"url": url})
    assert not result.ok
    assert "only http and https" in result.error, result.error
    assert fake_dns.lookups == []


@pytest.mark.parametrize("url", ["http:site.test/x", "HTTP:site.test", "http:/site.test/x",
                                 "https:///x", "HTTPS:"])
def test_http_without_a_host_is_refused(url: str, fake_dns: FakeDns) -> None:
    fake_dns.add("site.test", [PUBLIC_IP])
    result = WebFetchTool().run({"url": url})
    assert not result.ok and "no host" in result.error, result.error
    assert fake_dns.lookups == []


@pytest.mark.parametrize("url", ["http://site.test/", "https://site.test/",
                                 "HTTP://site.test/", "HtTpS://SITE.test/"])
def test_http_and_https_in_any_case_go_on_to_the_host(url: str, fake_dns: FakeDns) -> None:
    """Schemes are case-insensitive: these pass the scheme check and reach the lookup (the
    test guard then refuses the connection to the public address)."""
    fake_dns.add("site.test", [PUBLIC_IP])
    result = WebFetchTool(timeout_s=2.0).run({"url": url})
    assert fake_dns.count("site.test") == 1
    assert not result.ok and "cannot connect" in result.error, result.error


@pytest.mark.parametrize("url", [
    "http://127.0.0.1:9/", "http://localhost/", "http://[::1]/", "http://10.0.0.1/admin",
    "http://169.254.169.254/latest/meta-data", "http://2130706433/", "http://0.0.0.0/",
])
def test_local_and_private_addresses_refused_by_default(url: str) -> None:
    result = WebFetchTool(timeout_s=1.0).run({"url": url})
    assert not result.ok
    assert "private" in result.error


def test_unreachable_port_fails_quickly(closed_port: int) -> None:
    result = local_fetcher(timeout_s=3.0).run({"url": f"http://127.0.0.1:{closed_port}/"})
    assert not result.ok
    assert "cannot connect" in result.error


def test_silent_server_times_out(silent_port: int) -> None:
    result = local_fetcher(timeout_s=0.5).run({"url": f"http://127.0.0.1:{silent_port}/"})
    assert not result.ok
    assert "timed out" in result.error


@pytest.mark.parametrize("arguments", [{}, {"url": 42}, {"url": ""}, {"url": ["http://a"]}])
def test_bad_arguments_are_errors(arguments: dict) -> None:
    result = WebFetchTool().run(arguments)
    assert not result.ok and "url" in result.error


@pytest.mark.parametrize("address", [
    "127.0.0.1", "127.8.9.10", "10.0.0.1", "172.16.5.4", "192.168.1.1", "169.254.169.254",
    "100.64.0.1", "0.0.0.0", "224.0.0.251", "240.0.0.1", "255.255.255.255", "198.18.0.1",
    "::1", "::", "fe80::1", "fd00::1", "fec0::1", "ff02::1", "::ffff:127.0.0.1",
    "::ffff:10.0.0.1", "::127.0.0.1", "64:ff9b::a00:1", "2002:7f00:1::", "2002:a00:1::1",
])
def test_names_that_resolve_to_local_or_private_addresses_are_refused(
        address: str, fake_dns: FakeDns, web_server: str) -> None:
    """A name is judged by what it resolves to. 127.0.0.1 answers here (the local web
    server's port), so a name pointing at it would really be fetched if let through."""
    port = web_server.rsplit(":", 1)[1]
    fake_dns.add("intranet.test", [address])
    result = WebFetchTool(timeout_s=2.0).run({"url": f"http://intranet.test:{port}/article"})
    assert not result.ok
    shown = str(ipaddress.ip_address(address))  # "::ffff:7f00:1" for "::ffff:127.0.0.1"
    assert "private" in result.error and shown in result.error, result.error
    assert fake_dns.lookups == ["intranet.test"]  # and nothing was connected to


@pytest.mark.parametrize("answer", [[PUBLIC_IP, "127.0.0.1"], ["127.0.0.1", PUBLIC_IP],
                                    ["2606:2800:220:1::1", PUBLIC_IP, "10.1.2.3"]])
def test_every_address_of_a_name_is_checked(answer: list[str], fake_dns: FakeDns,
                                            web_server: str) -> None:
    port = web_server.rsplit(":", 1)[1]
    fake_dns.add("mixed.test", answer)
    result = WebFetchTool(timeout_s=2.0).run({"url": f"http://mixed.test:{port}/article"})
    assert not result.ok and "private" in result.error, result.error
    assert fake_dns.lookups == ["mixed.test"]


def test_public_addresses_pass_the_check() -> None:
    """IPv4-mapped and NAT64 addresses are judged by the IPv4 host they reach (on an
    IPv6-only network every site resolves to 64:ff9b::/96). 6to4 is left out: Python
    releases disagree on whether 2002::/16 itself is global."""
    for address in (PUBLIC_IP, "8.8.8.8", "2606:4700:4700::1111", "::ffff:8.8.8.8",
                    "64:ff9b::808:808"):
        assert web_fetch.is_public_address(ipaddress.ip_address(address)), address


def test_the_connection_goes_to_the_checked_address(fake_dns: FakeDns, web_server: str
                                                    ) -> None:
    """DNS rebinding: the name is public when checked and local a moment later. The fetch
    must connect to the address it checked (refused by the test guard here), never look
    the name up a second time and reach the local server."""
    port = web_server.rsplit(":", 1)[1]
    fake_dns.add("rebind.test", [PUBLIC_IP], ["127.0.0.1"])
    result = WebFetchTool(timeout_s=2.0).run({"url": f"http://rebind.test:{port}/article"})
    assert not result.ok and "cannot connect" in result.error, result.error
    assert fake_dns.count("rebind.test") == 1
    assert PUBLIC_IP in fake_dns.lookups


def test_a_pinned_connection_keeps_the_host_name(fake_dns: FakeDns, web_server: str
                                                 ) -> None:
    port = web_server.rsplit(":", 1)[1]
    fake_dns.add("intranet.test", ["127.0.0.1"])
    url = f"http://intranet.test:{port}/host"
    result = WebFetchTool(allow_private_hosts=True, timeout_s=5.0).run({"url": url})
    assert result.ok, result.error
    assert result.content == f"host=intranet.test:{port}"
    assert result.source == url
    assert fake_dns.count("intranet.test") == 1


def test_a_pinned_tls_connection_verifies_the_host_name(fake_dns: FakeDns,
                                                        tls_web_server: TlsServer) -> None:
    """Connected to 127.0.0.1, the TLS hello still names intranet.test and the certificate
    (valid for that name only) is checked against it."""
    fake_dns.add(TLS_NAME, ["127.0.0.1"])
    trust = ssl.create_default_context(cafile=str(TLS_CERT))
    url = f"https://{TLS_NAME}:{tls_web_server.port}/host"
    result = WebFetchTool(allow_private_hosts=True, timeout_s=5.0, verify=trust).run(
        {"url": url})
    assert result.ok, result.error
    assert result.content == f"host={TLS_NAME}:{tls_web_server.port}"
    assert tls_web_server.sni_names == [TLS_NAME]
    assert fake_dns.count(TLS_NAME) == 1


def test_a_certificate_for_another_name_is_refused(fake_dns: FakeDns,
                                                   tls_web_server: TlsServer) -> None:
    fake_dns.add("other.test", ["127.0.0.1"])
    trust = ssl.create_default_context(cafile=str(TLS_CERT))
    result = WebFetchTool(allow_private_hosts=True, timeout_s=5.0, verify=trust).run(
        {"url": f"https://other.test:{tls_web_server.port}/host"})
    assert not result.ok and "certificate" in result.error.lower(), result.error


def test_each_redirect_hop_is_resolved_and_checked(fake_dns: FakeDns, web_server: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The local server stands in for a public site; it redirects to a name that resolves
    to the router."""
    real = web_fetch.is_public_address
    monkeypatch.setattr(web_fetch, "is_public_address",
                        lambda a: str(a) == "127.0.0.1" or real(a))
    fake_dns.add("router.test", ["10.0.0.1"])
    result = WebFetchTool(timeout_s=2.0).run({"url": f"{web_server}/to-private-name"})
    assert not result.ok
    assert "private" in result.error and "10.0.0.1" in result.error, result.error
    assert fake_dns.count("router.test") == 1 and "10.0.0.1" not in fake_dns.lookups


def test_the_next_checked_address_is_tried_when_one_refuses(fake_dns: FakeDns,
                                                            web_server: str) -> None:
    """The server listens on 127.0.0.1 only: ::1 refuses, and the fetch goes on to the
    second address of the answer without looking the name up again."""
    port = web_server.rsplit(":", 1)[1]
    fake_dns.add("dual.test", ["::1", "127.0.0.1"])
    result = WebFetchTool(allow_private_hosts=True, timeout_s=5.0).run(
        {"url": f"http://dual.test:{port}/host"})
    assert result.ok, result.error
    assert result.content == f"host=dual.test:{port}"
    assert fake_dns.count("dual.test") == 1
