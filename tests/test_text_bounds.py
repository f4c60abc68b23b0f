"""A quote of user or file data is bounded and says how much it cut (issue 19, item 24)."""

from app.text_bounds import bounded


def test_short_text_is_quoted_whole() -> None:
    assert bounded("qwen3:4b", 20) == "qwen3:4b"
    assert bounded("x" * 20, 20) == "x" * 20


def test_long_text_keeps_its_start_and_says_what_was_cut() -> None:
    quoted = bounded("a" * 10_000_000, 40)
    assert quoted.startswith("a" * 40)
    assert quoted.endswith("… (cut: 9,999,960 more characters)")
    assert len(quoted) < 100
