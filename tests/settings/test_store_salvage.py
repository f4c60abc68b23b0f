"""A settings file JSON cannot read (one bad byte, a write cut short) keeps every setting that
can still be read, and the notice says which were reset and why (issue 19, item 9); a notice
that quotes the file's data stays short and says what it cut (issue 19, item 24)."""

from __future__ import annotations

import json
import os
from dataclasses import fields, replace
from pathlib import Path

import pytest

from app.settings.schema import AppSettings, LlmSettings
from app.settings.store import SettingsStore, to_dict
from app.text_bounds import NOTICE_LIMIT
from tests.settings.test_store import CUSTOM


def _flat(settings: AppSettings) -> dict[str, object]:
    return {f"{group.name}.{f.name}": getattr(getattr(settings, group.name), f.name)
            for group in fields(AppSettings) if group.name != "version"
            for f in fields(getattr(settings, group.name))}


def test_one_bad_byte_resets_only_the_setting_on_its_line(tmp_path: Path) -> None:
    store = SettingsStore(tmp_path / "settings.json")
    store.save(CUSTOM)
    saved = store.path.read_bytes()
    line = saved[: saved.index(b'"qwen3:4b"')].count(b"\n") + 1  # wherever the schema puts it
    store.path.write_bytes(saved.replace(b'"qwen3:4b"', b'"qwen3\xff4b"'))
    settings, notice = store.load()
    assert settings == replace(CUSTOM, llm=replace(CUSTOM.llm, model=LlmSettings().model))
    assert notice is not None
    assert "not valid JSON" in notice and "'llm.model'" in notice  # why, and what was reset
    assert f"line {line} could not be read" in notice
    assert store.load() == (settings, None)  # repaired with what was kept


def test_a_bad_byte_anywhere_costs_at_most_the_settings_of_its_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "fsync", lambda _fd: None)  # ~900 repairs: the disk's speed only
    original = json.dumps(to_dict(CUSTOM), indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    data = original.encode()
    lines = original.splitlines()
    # What each line holds: a setting ("llm.model"), an item of a list setting (the list),
    # or the whole group it opens.
    on_line: list[set[str]] = []
    group = key = ""
    for line in lines:
        if line.startswith('  "') and line.rstrip().endswith("{"):
            group = line.split('"')[1]
            on_line.append({name for name in _flat(CUSTOM) if name.startswith(f"{group}.")})
        elif line.startswith('    "'):
            key = line.split('"')[1]
            on_line.append({f"{group}.{key}"})
        elif line.startswith(("      ", "    ]")):
            on_line.append({f"{group}.{key}"})
        else:
            on_line.append(set())
    for i in range(len(data)):
        folder = tmp_path / str(i)
        folder.mkdir()
        store = SettingsStore(folder / "settings.json")
        store.path.write_bytes(data[:i] + b"\xff" + data[i + 1:])
        settings, notice = store.load()
        line = data[:i].count(b"\n")
        joined = data[i:i + 1] == b"\n" and line + 1 < len(on_line)  # two lines become one
        allowed = on_line[line] | (on_line[line + 1] if joined else set())
        lost = {name for name, value in _flat(settings).items() if value != _flat(CUSTOM)[name]}
        assert lost <= allowed, (i, lines[line], sorted(lost))
        assert notice is not None and "not valid JSON" in notice


def test_a_file_cut_short_keeps_what_it_has(tmp_path: Path) -> None:
    store = SettingsStore(tmp_path / "settings.json")
    store.save(CUSTOM)
    text = store.path.read_text(encoding="utf-8")
    store.path.write_text(text[: text.index('"stt_model"')], encoding="utf-8")
    settings, notice = store.load()
    # The groups are written in name order: audio and engine come before the cut, speech after.
    assert settings.audio == CUSTOM.audio and settings.engine == CUSTOM.engine
    assert settings.llm == replace(CUSTOM.llm, stt_model=LlmSettings().stt_model,
                                   timeout_s=LlmSettings().timeout_s,
                                   tools=LlmSettings().tools,
                                   tools_enabled=LlmSettings().tools_enabled)
    assert settings.speech == AppSettings().speech
    assert notice is not None and "ends before its last setting" in notice


HUGE = "k" * 10_000_000


@pytest.mark.parametrize("raw", [
    {"version": 1, HUGE: 1},  # a 10 MB key name
    {"version": 1, "llm": {HUGE: 1}},  # the same inside a group
    {"version": 1, "llm": {"timeout_s": HUGE}},  # a 10 MB value
    {"version": 1, "llm": {"tools": [1, HUGE]}},  # a 10 MB item of a list
    {"version": 1, **{f"{n}{HUGE[:100_000]}": n for n in range(50)}},  # many long keys
], ids=["key", "key-in-group", "value", "list-item", "many-keys"])
def test_a_notice_quoting_the_file_is_bounded_and_says_it_was_cut(tmp_path: Path, raw) -> None:
    store = SettingsStore(tmp_path / "settings.json")
    store.path.write_text(json.dumps(raw), encoding="utf-8")
    _, notice = store.load()
    assert notice is not None and len(notice) <= NOTICE_LIMIT + 100
    assert "cut:" in notice
    assert "kept at" in notice


def test_a_long_broken_file_gives_a_bounded_notice(tmp_path: Path) -> None:
    store = SettingsStore(tmp_path / "settings.json")
    store.path.write_text('{"version": 1, "' + HUGE + '": ,}', encoding="utf-8")
    settings, notice = store.load()
    assert settings == AppSettings()
    assert notice is not None and len(notice) <= NOTICE_LIMIT + 100


def test_a_huge_broken_file_is_not_read_setting_by_setting(tmp_path: Path) -> None:
    store = SettingsStore(tmp_path / "settings.json")
    store.path.write_text('{"version": 1, "llm": {"model": "qwen3:4b"},' + " " * 10_000_000,
                          encoding="utf-8")
    settings, notice = store.load()
    assert settings == AppSettings()
    assert notice is not None and "too large" in notice and "kept at" in notice


@pytest.mark.parametrize("body", [
    "{\n" + "".join(" " * i + '"a": x\n' for i in range(1, 3000)),  # ever deeper, all broken
    "{\n" + "".join(" " * i + '"a": {\n' for i in range(1, 3000)),  # ever deeper groups
    "{\n" + "}\n" * 20_000 + '"version": 1}',  # stray braces
    "[" * 100_000,
], ids=["deeper-broken", "deeper-groups", "braces", "brackets"])
def test_broken_files_of_any_shape_load_with_a_notice(tmp_path: Path, body: str) -> None:
    store = SettingsStore(tmp_path / "settings.json")
    store.path.write_text(body, encoding="utf-8")
    settings, notice = store.load()
    assert settings == AppSettings()
    assert notice is not None and "kept at" in notice
