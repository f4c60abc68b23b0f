"""The model catalog: the manifests shipped in models/ and the manifest parser."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from app.checkpoints.builders import BUILDERS
from app.checkpoints.catalog import (
    CatalogError,
    get_manifest,
    load_catalog,
    load_user_manifests,
    parse_manifest,
    user_manifests_dir,
)
from app.checkpoints.loader import parse_dtype
from app.paths import CATALOG_DIR

MANIFEST_FILES = sorted(CATALOG_DIR.glob("*.json"))
EXPECTED_IDS = {"moshiko", "moshika", "personaplex", "tiny", "tiny-persona", "moshi-7b-random"}


def _raw(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def _valid_raw() -> dict:
    """A minimal well-formed manifest."""
    return {
        "id": "example",
        "display_name": "Example",
        "source": {"kind": "local", "folder": "~/example"},
    }


# --- the shipped manifests -------------------------------------------------------------


def test_the_catalog_folder_holds_the_expected_manifests():
    assert {p.stem for p in MANIFEST_FILES} >= EXPECTED_IDS


@pytest.mark.parametrize("path", MANIFEST_FILES, ids=lambda p: p.name)
def test_every_shipped_manifest_parses_and_its_id_matches_its_file_name(path: Path):
    manifest = parse_manifest(_raw(path), origin=path.name)
    assert manifest.id == path.stem
    assert manifest.display_name.strip()
    assert manifest.source_kind in ("huggingface", "local", "built")
    # The sampling dtype must be one the loader understands.
    parse_dtype(manifest.sampling.dtype)
    assert manifest.max_span_tokens > 0
    assert manifest.max_chunk_positions > 0


def test_manifest_ids_are_unique_across_files():
    ids = [parse_manifest(_raw(p), origin=p.name).id for p in MANIFEST_FILES]
    assert len(ids) == len(set(ids)), ids


def test_load_catalog_returns_one_entry_per_file():
    catalog = load_catalog()
    assert set(catalog) == {p.stem for p in MANIFEST_FILES}
    for model_id, manifest in catalog.items():
        assert manifest.id == model_id


@pytest.mark.parametrize("path", MANIFEST_FILES, ids=lambda p: p.name)
def test_every_source_is_complete_for_its_kind(path: Path):
    manifest = parse_manifest(_raw(path), origin=path.name)
    if manifest.source_kind == "huggingface":
        assert manifest.hf_repo and "/" in manifest.hf_repo
        assert {"moshi", "mimi", "tokenizer"} <= set(manifest.files)
    elif manifest.source_kind == "built":
        assert manifest.builder in BUILDERS
    else:
        assert manifest.local_folder


def test_personaplex_is_gated_wrapped_in_system_tags_and_starts_with_a_persona_prompt():
    m = get_manifest("personaplex")
    assert m.source_kind == "huggingface"
    assert m.hf_repo == "nvidia/personaplex-7b-v1"
    assert m.gated is True
    assert (m.span_wrapping.open, m.span_wrapping.close) == ("<system>", "<system>")
    assert m.span_wrapping.trained is True

    start = m.conversation_start
    assert start.kind == "persona_prompt"
    assert (start.role_wrapping.open, start.role_wrapping.close) == ("<system>", "<system>")
    assert start.default_voice
    assert start.default_role
    assert start.silence_frames > 0
    assert start.voices_archive == m.files["voices"]
    # One Mimi code per codebook (8) for the silence and the user-side tone.
    assert start.agent_silence_codes is not None and len(start.agent_silence_codes) == 8
    assert start.user_tone_codes is not None and len(start.user_tone_codes) == 8
    assert all(isinstance(c, int) for c in start.agent_silence_codes + start.user_tone_codes)


@pytest.mark.parametrize("model_id", ["moshiko", "moshika"])
def test_vanilla_moshi_has_no_wrapping_and_no_persona_start(model_id: str):
    m = get_manifest(model_id)
    assert m.source_kind == "huggingface"
    assert m.hf_repo == f"kyutai/{model_id}-pytorch-bf16"
    assert m.gated is False
    assert (m.span_wrapping.open, m.span_wrapping.close) == ("", "")
    assert m.span_wrapping.trained is False
    assert m.conversation_start.kind == "none"


def test_built_manifests_live_under_the_data_dir(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("CONTEXTSPAN_DATA_DIR", str(tmp_path))
    tiny = get_manifest("tiny")
    assert tiny.source_kind == "built"
    assert tiny.default_folder() == tmp_path / "checkpoints" / "tiny"


# --- parse_manifest: well-formed input -----------------------------------------------


def test_parse_manifest_applies_defaults_for_optional_fields():
    m = parse_manifest(_valid_raw())
    assert m.id == "example"
    assert m.source_kind == "local"
    assert m.local_folder == "~/example"
    assert (m.span_wrapping.open, m.span_wrapping.close) == ("", "")
    assert m.conversation_start.kind == "none"
    assert m.gated is False
    assert m.default_folder() == Path("~/example").expanduser()


def test_parse_manifest_reads_codes_as_int_tuples():
    raw = _valid_raw()
    raw["generator"] = "forcing"
    raw["conversation_start"] = {
        "kind": "persona_prompt",
        "agent_silence_codes": [1, 2, 3],
        "user_tone_codes": ["4", 5],
    }
    start = parse_manifest(raw).conversation_start
    assert start.agent_silence_codes == (1, 2, 3)
    assert start.user_tone_codes == (4, 5)


# --- parse_manifest: malformed input -------------------------------------------------


def test_unknown_source_kind_is_rejected_with_the_kind_and_origin_named():
    raw = _valid_raw()
    raw["source"]["kind"] = "ftp"
    with pytest.raises(CatalogError) as info:
        parse_manifest(raw, origin="weird.json")
    assert "ftp" in str(info.value)
    assert "weird.json" in str(info.value)


@pytest.mark.parametrize(
    "path_to_delete",
    [("id",), ("display_name",), ("source",), ("source", "kind")],
    ids=lambda p: ".".join(p),
)
def test_missing_required_keys_raise_catalog_error(path_to_delete: tuple[str, ...]):
    raw = copy.deepcopy(_valid_raw())
    parent = raw
    for key in path_to_delete[:-1]:
        parent = parent[key]
    del parent[path_to_delete[-1]]
    with pytest.raises(CatalogError) as info:
        parse_manifest(raw, origin="broken.json")
    assert "broken.json" in str(info.value)
    assert path_to_delete[-1] in str(info.value)


@pytest.mark.parametrize(
    "mutate",
    [
        lambda raw: raw.update(source="huggingface"),  # not an object
        lambda raw: raw.update(sampling={"no_such_setting": 1}),
        lambda raw: raw.update(max_span_tokens="lots"),
        lambda raw: raw.update(conversation_start={"kind": "none", "silence_frames": "six"}),
        lambda raw: raw.update(conversation_start={"kind": "none", "user_tone_codes": ["x"]}),
    ],
    ids=["source-not-object", "unknown-sampling-key", "bad-int", "bad-silence", "bad-codes"],
)
def test_malformed_values_raise_catalog_error(mutate):
    raw = _valid_raw()
    mutate(raw)
    with pytest.raises(CatalogError):
        parse_manifest(raw)


def test_unknown_conversation_start_kind_is_rejected():
    raw = _valid_raw()
    raw["conversation_start"] = {"kind": "monologue"}
    with pytest.raises(CatalogError) as info:
        parse_manifest(raw, origin="odd.json")
    assert "monologue" in str(info.value)
    assert "odd.json" in str(info.value)


def test_catalog_error_is_a_value_error():
    # Callers that catch ValueError for bad user input also catch catalog problems.
    raw = _valid_raw()
    raw["source"]["kind"] = "nope"
    with pytest.raises(ValueError):
        parse_manifest(raw)


# --- load_catalog / get_manifest -----------------------------------------------------


def test_invalid_json_names_the_file(tmp_path: Path):
    (tmp_path / "good.json").write_text(json.dumps(_valid_raw()), encoding="utf-8")
    (tmp_path / "bad.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(CatalogError, match="bad.json"):
        load_catalog(tmp_path)


def test_an_id_used_twice_names_the_second_file(tmp_path: Path):
    (tmp_path / "a.json").write_text(json.dumps(_valid_raw()), encoding="utf-8")
    (tmp_path / "b.json").write_text(json.dumps(_valid_raw()), encoding="utf-8")
    with pytest.raises(CatalogError, match="b.json: model id 'example' is used twice"):
        load_catalog(tmp_path)


def test_the_catalog_holds_the_checkpoints_trained_here(tmp_path: Path, monkeypatch):
    """Manifests in <data dir>/models join the shipped ones; a shipped id stays the shipped
    model, and a broken user manifest is named by its full path."""
    monkeypatch.setenv("CONTEXTSPAN_DATA_DIR", str(tmp_path))
    assert user_manifests_dir() == tmp_path / "models"
    user_manifests_dir().mkdir()
    trained = dict(_valid_raw(), id="my-trained", display_name="Mine")
    imposter = dict(_valid_raw(), id="tiny", display_name="Not the tiny model")
    (tmp_path / "models" / "my-trained.json").write_text(json.dumps(trained), encoding="utf-8")
    (tmp_path / "models" / "tiny.json").write_text(json.dumps(imposter), encoding="utf-8")

    catalog = load_catalog()
    assert catalog["my-trained"].display_name == "Mine"
    assert catalog["tiny"].source_kind == "built"  # the shipped one
    assert set(load_user_manifests()) == {"my-trained", "tiny"}
    assert "my-trained" not in load_catalog(CATALOG_DIR.parent / "no-such-folder")

    broken = tmp_path / "models" / "broken.json"
    broken.write_text("{not json", encoding="utf-8")
    with pytest.raises(CatalogError, match=f"{broken}: not valid JSON"):
        get_manifest("tiny")


def test_get_manifest_from_another_folder(tmp_path: Path):
    (tmp_path / "example.json").write_text(json.dumps(_valid_raw()), encoding="utf-8")
    assert get_manifest("example", tmp_path).display_name == "Example"


def test_unknown_model_id_lists_the_known_ids():
    with pytest.raises(CatalogError) as info:
        get_manifest("no-such-model")
    message = str(info.value)
    assert "no-such-model" in message
    for model_id in EXPECTED_IDS:
        assert model_id in message
