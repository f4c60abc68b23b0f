"""The Context Spanning release's layout loads strictly, through the real loader, on stock
moshi: a {"model": state_dict} pickle with the fork's key names and `._orig_mod.`, Mimi with
8 codebooks, a 16-codebook depformer, voices as Mimi-code files."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from moshi.models import loaders
from safetensors.torch import save_file

from app.checkpoints.architectures import tiny_cs
from app.checkpoints.catalog import get_manifest
from app.checkpoints.loader import load_checkpoint
from app.checkpoints.release_weights import WeightsFormatError, load_lm_weights, read_state_dict

WEIGHTS = "context_spanning_7b.pt"


def test_tiny_cs_is_written_in_the_release_layout(tiny_cs_folder: Path):
    names = sorted(p.relative_to(tiny_cs_folder).as_posix() for p in tiny_cs_folder.rglob("*")
                   if p.is_file())
    assert names == [WEIGHTS, "tokenizer-e351c8d8-checkpoint125.safetensors",
                     "tokenizer_spm_32k_3.model", "voices/f0.pt", "voices/m0.pt"]
    package = torch.load(tiny_cs_folder / WEIGHTS, weights_only=True)
    assert list(package) == ["model"]
    keys = list(package["model"])
    assert all(package["model"][k].dtype == torch.bfloat16 for k in keys)
    # The fork's naming: one concatenated projection per attention, compiled module prefix.
    assert "transformer._orig_mod.layers.0.self_attn.in_proj_weight" in keys
    assert "depformer._orig_mod.layers.0.self_attn.out_proj.weight" in keys
    assert not any(".in_projs." in k or ".out_projs." in k for k in keys)
    # dep_q 16: a 16-step depformer (16 heads out, 16 gatings, 15 code embeddings).
    assert sum(k.startswith("linears.") and k.endswith(".weight") for k in keys) == 16
    assert sum(k.startswith("depformer_emb.") for k in keys) == 15
    voice = torch.load(tiny_cs_folder / "voices" / "f0.pt", weights_only=True)
    assert list(voice) == ["codes"] and voice["codes"].dtype == torch.long
    assert voice["codes"].shape[0] == 8 and voice["codes"].shape[1] > 10


def test_tiny_cs_loads_strictly_with_a_16_codebook_depformer_and_an_8_codebook_mimi(
        tiny_cs_checkpoint):
    ck = tiny_cs_checkpoint
    assert ck.lm.dep_q == 16 and ck.lm.n_q == 16
    assert ck.mimi.num_codebooks == 8  # moshi's own get_mimi would have given 16
    # Every parameter came from the file: the loaded model equals the file's tensors.
    state = read_state_dict(ck.folder / WEIGHTS)
    loaded = ck.lm.state_dict()
    assert torch.equal(loaded["text_emb.weight"], state["text_emb.weight"].float())
    in_proj = state["depformer.layers.0.self_attn.in_proj_weight"].float()
    steps = in_proj.view(16, -1, in_proj.shape[-1])
    assert torch.equal(loaded["depformer.layers.0.self_attn.in_projs.15.weight"], steps[15])
    # The control ids are the tokenizer's byte pieces, as in Moshi's real tokenizer.
    assert [ck.tokenizer.id_to_piece(i) for i in (4, 12, 13)] == ["<0x00>", "<0x08>", "<0x09>"]


def _write_without(state: dict, path: Path, drop: str | None = None, extra: str | None = None):
    state = dict(state)
    if drop:
        state.pop(drop)
    if extra:
        state[extra] = torch.zeros(2)
    torch.save({"model": state}, path)


def test_a_missing_or_unexpected_weight_is_an_error_that_names_it(tiny_cs_folder, tmp_path):
    original = torch.load(tiny_cs_folder / WEIGHTS, weights_only=True)["model"]
    missing = tmp_path / "missing.pt"
    _write_without(original, missing, drop="linears.15.weight")
    with pytest.raises(WeightsFormatError, match=r"missing 1 \(linears\.15\.weight\)"):
        load_lm_weights(missing, tiny_cs(), "cpu", torch.float32)
    unexpected = tmp_path / "unexpected.pt"
    _write_without(original, unexpected, extra="lora.A")
    with pytest.raises(WeightsFormatError, match=r"unexpected 1 \(lora\.A\)"):
        load_lm_weights(unexpected, tiny_cs(), "cpu", torch.float32)
    not_a_state = tmp_path / "list.pt"
    torch.save([1, 2, 3], not_a_state)
    with pytest.raises(WeightsFormatError, match="state dict"):
        load_lm_weights(not_a_state, tiny_cs(), "cpu", torch.float32)


def test_safetensors_in_either_projection_layout_load_the_same_model(tiny_cs_checkpoint,
                                                                    tmp_path):
    """PersonaPlex's model.safetensors may hold the fork's concatenated projections or
    stock moshi's per-step ones: both load, to the same parameters."""
    reference = tiny_cs_checkpoint.lm.state_dict()
    split = tmp_path / "split.safetensors"
    save_file({k: v.contiguous() for k, v in reference.items()}, str(split))
    concatenated = tmp_path / "concatenated.safetensors"
    state = read_state_dict(tiny_cs_checkpoint.folder / WEIGHTS)
    save_file({k: v.float().contiguous() for k, v in state.items()}, str(concatenated))
    for path in (split, concatenated):
        lm = load_lm_weights(path, tiny_cs(), "cpu", torch.float32)
        for key, value in lm.state_dict().items():
            assert torch.equal(value, reference[key]), key


def test_bf16_weights_load_as_the_model_keeps_them(tiny_cs_folder):
    lm = load_lm_weights(tiny_cs_folder / WEIGHTS, tiny_cs(), "cpu", torch.bfloat16)
    skeleton = loaders.get_moshi_lm(None, lm_kwargs=tiny_cs(), device="meta",
                                    dtype=torch.bfloat16)
    built = {name: p.dtype for name, p in skeleton.named_parameters()}
    assert {name: p.dtype for name, p in lm.named_parameters()} == built


def test_the_catalog_names_every_release_file_and_where_it_comes_from():
    m = get_manifest("context-spanning-7b")
    assert m.hf_repo == "mindlogicinc/context-spanning-7b"
    assert m.files["moshi"] == WEIGHTS
    assert m.file_repos == {"mimi": "nvidia/personaplex-7b-v1",
                            "tokenizer": "nvidia/personaplex-7b-v1"}
    assert {m.files[f"voice_{v}"] for v in ("f0", "m0", "seonghyeon")} == {
        "voices/f0.pt", "voices/m0.pt", "voices/seonghyeon.pt"}
    assert m.architecture is not None and m.architecture.lm == "personaplex-7b"
    assert m.generator == "forcing"
    assert (m.span_wrapping.open_ids, m.span_wrapping.close_ids) == ((12,), (13,))
    assert m.span_placement.kind == "block"
    assert m.span_placement.agent_codes == (948, 243, 1178, 546, 1736, 1030, 1978, 2008)
    assert m.span_placement.user_codes == (430, 1268, 381, 1611, 1095, 1495, 56, 472)
    assert (m.retrieval.trigger, m.retrieval.ret_id, m.retrieval.deadline_s) == (
        "ret_token", 4, 2.5)
    start = m.conversation_start
    assert (start.silence_frames, start.trailing_silence, start.profile_sentences) == (
        1, "after_persona", True)
    sampling = m.sampling
    assert (sampling.temp, sampling.temp_text, sampling.top_k, sampling.top_k_text) == (
        0.8, 0.7, 250, 25)


def test_loading_tiny_cs_through_the_manifest_never_needs_a_config_json(tiny_cs_folder):
    assert not (tiny_cs_folder / "config.json").exists()
    ck = load_checkpoint(get_manifest("tiny-cs"), tiny_cs_folder, device="cpu")
    assert ck.info.raw_config is None and ck.info.lm_config["dep_q"] == 16
