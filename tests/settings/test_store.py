"""SettingsStore: a user's settings survive every kind of bad file, and a backup is kept."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from app.settings import store as store_module
from app.settings.schema import (
    SCHEMA_VERSION,
    AppSettings,
    AudioSettings,
    LlmSettings,
    SpeechModelSettings,
)
from app.settings.store import SettingsStore, to_dict

CUSTOM = AppSettings(
    speech=SpeechModelSettings(
        model_id="personaplex",
        custom_folder="/models/pp",
        device="cuda:1",
        precision="int8",
        voice="NATF2",
        role="Tu es un guide de musée — patient et précis.",
    ),
    audio=AudioSettings(input_device="USB Mic", output_device=None, echo_mode="headset"),
    llm=LlmSettings(
        backend="openai",
        host="http://127.0.0.1:8080/v1",
        model="qwen3:4b",
        timeout_s=12.5,
        tools_enabled=False,
        tools=("clock", "calculator"),
        search_folders=("/home/me/notes", "/home/me/papers"),
        stt_model="tiny-stt",
    ),
)


@pytest.fixture()
def store(tmp_path: Path) -> SettingsStore:
    return SettingsStore(tmp_path / "settings.json")


def backups(store: SettingsStore) -> list[Path]:
    return sorted(store.path.parent.glob("settings.json.bak-*"))


def write(store: SettingsStore, raw: object) -> bytes:
    data = json.dumps(raw).encode()
    store.path.write_bytes(data)
    return data


def test_missing_file_gives_defaults_silently(store: SettingsStore) -> None:
    assert store.load() == (AppSettings(), None)
    assert not store.path.exists()


def test_default_path_follows_the_config_dir_override(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CONTEXTSPAN_CONFIG_DIR", str(tmp_path / "cfg"))
    store = SettingsStore()
    assert store.path == tmp_path / "cfg" / "settings.json"
    store.save(CUSTOM)  # creates the folder
    assert SettingsStore().load() == (CUSTOM, None)


def test_round_trip_is_exact_and_readable(store: SettingsStore) -> None:
    store.save(CUSTOM)
    assert store.load() == (CUSTOM, None)
    text = store.path.read_text(encoding="utf-8")
    assert text == json.dumps(json.loads(text), indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    assert "précis" in text  # readable, not \u-escaped
    raw = json.loads(text)
    assert raw["llm"]["tools"] == ["clock", "calculator"]  # tuples are lists on disk
    assert raw["version"] == SCHEMA_VERSION
    assert [p.name for p in store.path.parent.iterdir()] == ["settings.json"]  # no temp left


def test_save_replaces_the_previous_file(store: SettingsStore) -> None:
    store.save(CUSTOM)
    store.save(AppSettings())
    assert store.load() == (AppSettings(), None)


def test_corrupt_json_is_backed_up_and_what_it_holds_is_kept(store: SettingsStore) -> None:
    original = b'{"version": 1, "llm": {"model": "qwen3:4b",'  # cut off mid-write
    store.path.write_bytes(original)
    settings, notice = store.load()
    # Issue 19, item 9: what can be read of a broken file is kept (it once reset everything).
    assert settings == AppSettings(llm=LlmSettings(model="qwen3:4b"))
    [backup] = backups(store)
    assert backup.read_bytes() == original
    assert notice is not None and str(backup) in notice and "not valid JSON" in notice
    assert store.load() == (settings, None)  # the file was repaired


@pytest.mark.parametrize("data", [b"[1, 2]", b"\xff\xfe not utf-8", b""])
def test_other_unreadable_contents_are_backed_up_too(store: SettingsStore, data: bytes) -> None:
    store.path.write_bytes(data)
    settings, notice = store.load()
    assert settings == AppSettings()
    [backup] = backups(store)
    assert backup.read_bytes() == data
    assert notice is not None and str(backup) in notice


def test_partial_file_keeps_its_valid_values(store: SettingsStore) -> None:
    original = write(store, {"version": 1, "llm": {"model": "qwen3:4b", "timeout_s": 5}})
    settings, notice = store.load()
    assert settings == AppSettings(llm=LlmSettings(model="qwen3:4b", timeout_s=5.0))
    assert notice is not None and "missing" in notice and "'speech'" in notice
    [backup] = backups(store)
    assert backup.read_bytes() == original
    assert store.load() == (settings, None)


def test_wrong_types_are_ignored_field_by_field(store: SettingsStore) -> None:
    raw = to_dict(CUSTOM)
    raw["llm"]["timeout_s"] = "fast"
    raw["llm"]["tools_enabled"] = "yes"
    raw["llm"]["tools"] = ["clock", 3]
    raw["audio"]["echo_mode"] = "loud"
    raw["speech"]["precision"] = "int3"  # not one of the precisions
    raw["speech"]["voice"] = None  # valid: optional
    write(store, raw)
    settings, notice = store.load()
    expected_llm = LlmSettings(
        backend="openai",
        host="http://127.0.0.1:8080/v1",
        model="qwen3:4b",
        search_folders=CUSTOM.llm.search_folders,
        stt_model="tiny-stt",
    )
    assert settings.llm == expected_llm
    assert settings.audio == AudioSettings(input_device="USB Mic", echo_mode="cancel")
    assert settings.speech.precision == "auto"
    assert settings.speech.voice is None
    assert settings.speech.role == CUSTOM.speech.role
    assert notice is not None
    for key in ("llm.timeout_s", "llm.tools_enabled", "llm.tools", "audio.echo_mode",
                "speech.precision"):
        assert key in notice
    assert str(backups(store)[0]) in notice


def test_unknown_keys_are_reported_not_silently_dropped(store: SettingsStore) -> None:
    raw = to_dict(CUSTOM)
    raw["llm"]["temperature"] = 0.2
    write(store, raw)
    settings, notice = store.load()
    assert settings == CUSTOM
    assert notice is not None and "llm.temperature" in notice
    assert json.loads(backups(store)[0].read_text())["llm"]["temperature"] == 0.2


def test_older_version_is_migrated_with_a_backup(
    store: SettingsStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    def rename_model_key(raw: dict) -> dict:  # version 0 called it "checkpoint"
        speech = dict(raw["speech"])
        speech["model_id"] = speech.pop("checkpoint")
        return {**raw, "speech": speech}

    monkeypatch.setitem(store_module.MIGRATIONS, 0, rename_model_key)
    raw = to_dict(CUSTOM)
    raw["version"] = 0
    raw["speech"]["checkpoint"] = raw["speech"].pop("model_id")
    original = write(store, raw)
    settings, notice = store.load()
    assert settings == CUSTOM and settings.version == SCHEMA_VERSION
    assert notice is not None and "upgraded" in notice
    [backup] = backups(store)
    assert backup.read_bytes() == original and str(backup) in notice
    assert json.loads(store.path.read_text())["version"] == SCHEMA_VERSION


def test_newer_version_loads_what_it_understands_and_leaves_the_file(
    store: SettingsStore,
) -> None:
    raw = to_dict(CUSTOM)
    raw["version"] = SCHEMA_VERSION + 1
    raw["llm"]["reasoning"] = "high"
    original = write(store, raw)
    settings, notice = store.load()
    assert settings == CUSTOM
    assert notice is not None and "newer" in notice and "llm.reasoning" in notice
    assert store.path.read_bytes() == original
    _, again = store.load()  # the same file again: the same backup, not a second one
    [backup] = backups(store)
    assert backup.read_bytes() == original and str(backup) in (again or "")


def test_backups_are_never_overwritten(store: SettingsStore) -> None:
    first, second = b"{broken one", b"{broken two"
    store.path.write_bytes(first)
    store.load()
    store.path.write_bytes(second)
    store.load()
    assert sorted(p.read_bytes() for p in backups(store)) == sorted([first, second])


def test_save_into_an_unusable_folder_raises_a_clear_oserror(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the config folder should be")
    store = SettingsStore(blocker / "settings.json")
    with pytest.raises(OSError, match="Could not save settings to .*not-a-folder"):
        store.save(CUSTOM)


def test_corrupt_file_in_an_unusable_folder_is_left_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = SettingsStore(tmp_path / "settings.json")
    store.path.write_bytes(b"{oops")

    def refuse(self: SettingsStore, original: bytes) -> Path:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(SettingsStore, "_backup", refuse)
    settings, notice = store.load()
    assert settings == AppSettings()
    assert notice is not None and "could not be backed up" in notice
    assert store.path.read_bytes() == b"{oops"


@pytest.mark.parametrize("old, precision", [
    ({"dtype": "bfloat16", "quantize": True}, "int8"),  # the 8-bit weights asked for
    ({"dtype": "float32", "quantize": False}, "fp32"),
    ({"dtype": "bfloat16", "quantize": False}, "bf16"),
    ({"dtype": "float16", "quantize": False}, "auto"),  # no such precision: the plan's pick
    ({"dtype": "auto", "quantize": False}, "auto"),
])
def test_a_version_1_file_keeps_its_precision_in_the_one_setting(store: SettingsStore, old,
                                                                 precision) -> None:
    raw = to_dict(CUSTOM)
    raw["version"] = 1
    del raw["speech"]["precision"]
    raw["speech"].update(old)
    write(store, raw)
    settings, notice = store.load()
    assert settings.speech.precision == precision
    assert settings == replace(CUSTOM, speech=replace(CUSTOM.speech, precision=precision))
    assert notice is not None and f"upgraded from settings version 1 to {SCHEMA_VERSION}" in notice
    assert "unknown" not in notice and "missing" not in notice  # dtype/quantize migrated
    saved = json.loads(store.path.read_text())
    assert saved["version"] == SCHEMA_VERSION and "dtype" not in saved["speech"]
    assert store.load() == (settings, None)  # the next start is clean
