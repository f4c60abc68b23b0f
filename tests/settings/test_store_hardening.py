"""Files the settings store cannot use as they are never stop the app or reset everything
silently: deep nesting, enormous numbers, a byte-order mark; and values out of range (NaN,
infinite or negative timeouts) are refused, each with a notice naming the file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.settings.schema import AppSettings, LlmSettings
from app.settings.store import SettingsStore, field_range, to_dict


def _saved(tmp_path: Path, **llm) -> tuple[SettingsStore, dict]:
    store = SettingsStore(tmp_path / "settings.json")
    raw = to_dict(AppSettings(llm=LlmSettings(model="qwen3:4b", **llm)))
    return store, raw


def test_a_byte_order_mark_is_not_an_error(tmp_path):
    store, raw = _saved(tmp_path)
    store.path.write_bytes(b"\xef\xbb\xbf" + json.dumps(raw).encode("utf-8"))
    settings, notice = store.load()
    assert notice is None and settings.llm.model == "qwen3:4b"


@pytest.mark.parametrize("body", [
    "[" * 100_000 + "]" * 100_000,  # deeper than the JSON reader recurses
    '{"version": 1, "llm": {"timeout_s": ' + "9" * 10_000 + "}}",  # an endless integer
], ids=["deep", "huge-integer"])
def test_unreadable_files_are_backed_up_with_a_notice_and_the_app_starts(tmp_path, body):
    store = SettingsStore(tmp_path / "settings.json")
    store.path.write_text(body)
    settings, notice = store.load()
    assert settings == AppSettings()
    assert notice is not None and str(store.path) in notice and "kept at" in notice
    backups = list(tmp_path.glob("settings.json.bak-*"))
    assert len(backups) == 1 and backups[0].read_text() == body


@pytest.mark.parametrize("timeout", ["NaN", "Infinity", "-Infinity", "-5", "0", "1e999",
                                     "100000"])
def test_timeouts_out_of_range_are_refused_and_the_rest_kept(tmp_path, timeout):
    store, raw = _saved(tmp_path)
    text = json.dumps(raw).replace('"timeout_s": 30.0', f'"timeout_s": {timeout}')
    assert timeout in text
    store.path.write_text(text)
    settings, notice = store.load()
    assert settings.llm.timeout_s == LlmSettings().timeout_s  # the default
    assert settings.llm.model == "qwen3:4b"  # everything else kept
    assert notice is not None and "timeout_s" in notice


def test_the_timeout_range_is_one_fact_for_the_store_and_its_users():
    low, high = field_range(LlmSettings, "timeout_s")
    assert 0 < low < LlmSettings().timeout_s < high
