"""Converting a checkpoint's torch weights into the MLX LM: the same files the torch loader
reads (tiny's safetensors, tiny-cs's release pickle with `._orig_mod.` and the fork's stacked
projections, tiny-persona's files through its own manifest), strictly."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

mx = pytest.importorskip("mlx.core", reason="mlx does not import here (pip install mlx[cpu])")

from app.checkpoints.catalog import get_manifest  # noqa: E402
from app.checkpoints.loader import load_checkpoint  # noqa: E402
from app.checkpoints.tiny_cs_builder import RELEASE_WEIGHTS_FILE  # noqa: E402
from app.engine.mlx.lm import LmShape, UnsupportedArchitectureError  # noqa: E402
from app.engine.mlx.weights import MlxWeightsError, load_mlx_lm, parameter_count  # noqa: E402


@pytest.mark.parametrize("model", ["tiny", "tiny-persona", "tiny-cs"])
def test_every_torch_parameter_converts(model, tiny_folder, tiny_cs_folder):
    folder = tiny_cs_folder if model == "tiny-cs" else tiny_folder
    manifest = get_manifest(model)
    torch_lm = load_checkpoint(manifest, folder, device="cpu").lm
    mlx_lm = load_mlx_lm(manifest, folder)
    assert parameter_count(mlx_lm) == sum(p.numel() for p in torch_lm.parameters())
    assert mlx_lm.shape.dep_q == torch_lm.dep_q
    assert mlx_lm.shape.context == torch_lm.context
    # The fork's stacked depformer projections, split per step as moshi's load hook does.
    step = torch_lm.dep_q - 1
    torch_weight = torch_lm.depformer.layers[0].self_attn.in_projs[step].weight
    mlx_weight = mlx_lm.depformer.layers[0].self_attn.in_projs[step].weight
    assert torch.equal(torch_weight, torch.from_numpy(np.array(mlx_weight)))


def _release_copy(tiny_cs_folder: Path, tmp_path: Path, edit) -> Path:
    """tiny-cs with its release pickle edited."""
    folder = tmp_path / "tiny-cs"
    shutil.copytree(tiny_cs_folder, folder)
    path = folder / RELEASE_WEIGHTS_FILE
    package = torch.load(path, map_location="cpu", weights_only=True)
    edit(package["model"])
    torch.save(package, path)
    return folder


def test_a_missing_key_fails_and_is_named(tiny_cs_folder, tmp_path):
    key = "depformer._orig_mod.layers.0.gating.3.linear_in.weight"
    folder = _release_copy(tiny_cs_folder, tmp_path, lambda state: state.pop(key))
    with pytest.raises(MlxWeightsError, match=r"missing 1 \(depformer\.layers\.0\.gating\.3"):
        load_mlx_lm(get_manifest("tiny-cs"), folder)


def test_an_extra_key_fails_and_is_named(tiny_cs_folder, tmp_path):
    def add(state):
        state["transformer._orig_mod.layers.0.self_attn.lora_A.weight"] = torch.zeros(4, 4)

    folder = _release_copy(tiny_cs_folder, tmp_path, add)
    with pytest.raises(MlxWeightsError, match=r"unexpected 1 \(transformer\.layers\.0\.self_attn"
                                              r"\.lora_A\.weight\)"):
        load_mlx_lm(get_manifest("tiny-cs"), folder)


def test_a_tensor_of_the_wrong_shape_fails_and_is_named(tiny_cs_folder, tmp_path):
    def shrink(state):
        state["text_linear.weight"] = state["text_linear.weight"][:-1]

    folder = _release_copy(tiny_cs_folder, tmp_path, shrink)
    with pytest.raises(MlxWeightsError, match="text_linear.weight has shape"):
        load_mlx_lm(get_manifest("tiny-cs"), folder)


def test_an_architecture_it_does_not_implement_is_refused_by_name():
    from app.checkpoints.tiny_builder import tiny_lm_config

    with pytest.raises(UnsupportedArchitectureError, match="norm='layer_norm'"):
        LmShape.from_config(tiny_lm_config() | {"norm": "layer_norm"})
    with pytest.raises(UnsupportedArchitectureError, match="demux_second_text_stream"):
        LmShape.from_config(tiny_lm_config() | {"demux_second_text_stream": True})


@pytest.mark.parametrize("architecture", ["moshi-7b", "personaplex-7b"])
def test_the_7b_architectures_have_the_torch_models_names_and_shapes(architecture):
    """The real checkpoints' key sets, checked without their 15 GB: both models built without
    weights (torch on the meta device, MLX lazily), every name and shape alike."""
    from mlx.utils import tree_flatten
    from moshi.models import loaders

    from app.checkpoints.architectures import personaplex_7b
    from app.engine.mlx.lm import MlxLm
    from app.engine.mlx.weights import split_stacked_projections
    from app.moshi_internals import moshi_7b_config

    config = personaplex_7b() if architecture == "personaplex-7b" else moshi_7b_config()
    torch_lm = loaders.get_moshi_lm(None, lm_kwargs=config, device=torch.device("meta"),
                                    dtype=torch.bfloat16)
    shape = LmShape.from_config(config)
    wanted = {k: tuple(v.shape) for k, v in tree_flatten(MlxLm(shape).parameters())}
    given = {k: tuple(v.shape) for k, v in split_stacked_projections(
        torch_lm.state_dict(), shape).items()}
    assert given == wanted
    assert shape.context == 3000
