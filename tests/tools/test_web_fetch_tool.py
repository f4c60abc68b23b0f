"""web_fetch against a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import pytest

from app.tools.web_fetch import WebFetchTool


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
    "file:///etc/passwd", "data:text/plain,hello", "ftp://example.com/x",
    "javascript:alert(1)", "gopher://127.0.0.1/", "/relative/path", "not a url at all",
])
def test_non_http_schemes_are_refused(url: str) -> None:
    result = WebFetchTool().run({"url": url})
    assert not result.ok
    assert result.error


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
