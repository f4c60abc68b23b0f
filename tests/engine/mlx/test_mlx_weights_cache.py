"""The converted MLX weights, kept in the data dir and keyed by their source: read back on the
next load (no conversion runs, the file is not rewritten), rebuilt when the source changes or
the cache file is damaged (with a notice), and a file that does not convert named with its
cache key. Then: an MLX checkpoint holds no torch LM, so its engine holds none either."""

from __future__ import annotations

import gc
import shutil
import types
from pathlib import Path

import numpy as np
import pytest
import torch

mx = pytest.importorskip("mlx.core", reason="mlx does not import here (pip install mlx[cpu])")

from moshi.models import LMModel  # noqa: E402

from app.checkpoints.catalog import get_manifest  # noqa: E402
from app.checkpoints.tiny_cs_builder import RELEASE_WEIGHTS_FILE  # noqa: E402
from app.engine.mlx import weights_cache  # noqa: E402
from app.engine.mlx.checkpoint import load_mlx_checkpoint  # noqa: E402
from app.engine.mlx.weights import MlxWeightsError  # noqa: E402
from app.engine.mlx.weights_cache import load_cached_mlx_lm  # noqa: E402

TEXT_WEIGHT = "text_linear.weight"


def _copy(tiny_cs_folder: Path, tmp_path: Path) -> Path:
    folder = tmp_path / "tiny-cs"
    shutil.copytree(tiny_cs_folder, folder)
    return folder


def _edit_release(folder: Path, edit) -> None:
    path = folder / RELEASE_WEIGHTS_FILE
    package = torch.load(path, map_location="cpu", weights_only=True)
    edit(package["model"])
    torch.save(package, path)


def _text_weight(lm) -> np.ndarray:
    return np.array(lm.text_linear.weight)


def _text_logits(lm) -> np.ndarray:
    """One column through the transformer: the same weights give the same logits."""
    shape = lm.shape
    codes = mx.array(np.array(shape.initial_column(), dtype=np.int64)[None, :, None])
    _out, logits = lm.forward_text(codes, lm.new_stream())
    return np.array(logits.astype(mx.float32))


def _refuse_conversion(monkeypatch) -> None:
    def converted_again(*_args, **_kwargs):
        raise AssertionError("the weights were converted again instead of read from the cache")

    monkeypatch.setattr(weights_cache, "load_mlx_lm", converted_again)


@pytest.mark.parametrize("precision, bits", [("fp32", None), ("q8", 8), ("q4", 4)])
def test_the_second_load_reads_the_cache(precision, bits, tiny_cs_folder, tmp_path,
                                         monkeypatch):
    cache = tmp_path / "cache"
    manifest = get_manifest("tiny-cs")
    first = load_cached_mlx_lm(manifest, tiny_cs_folder, precision, mx.float32, bits,
                               cache_dir=cache)
    assert not first.from_cache and first.notice is None
    assert first.path.is_file() and first.key.text() in first.path.name
    written = first.path.stat().st_mtime_ns
    _refuse_conversion(monkeypatch)
    second = load_cached_mlx_lm(manifest, tiny_cs_folder, precision, mx.float32, bits,
                                cache_dir=cache)
    assert second.from_cache and second.path == first.path
    assert second.path.stat().st_mtime_ns == written  # read, not written again
    np.testing.assert_array_equal(_text_logits(second.lm), _text_logits(first.lm))


def test_a_changed_source_is_converted_again_and_the_old_file_removed(tiny_cs_folder,
                                                                        tmp_path):
    cache, folder = tmp_path / "cache", _copy(tiny_cs_folder, tmp_path)
    manifest = get_manifest("tiny-cs")
    before = load_cached_mlx_lm(manifest, folder, "fp32", mx.float32, None, cache_dir=cache)

    def doubled(state):
        key = next(k for k in state if k.endswith(TEXT_WEIGHT))
        state[key] = state[key] * 2

    _edit_release(folder, doubled)
    after = load_cached_mlx_lm(manifest, folder, "fp32", mx.float32, None, cache_dir=cache)
    assert not after.from_cache
    assert after.key.source_sha256 != before.key.source_sha256
    assert after.path != before.path and not before.path.exists()
    np.testing.assert_allclose(_text_weight(after.lm), 2 * _text_weight(before.lm))
    assert sorted(p.name for p in cache.glob("*.safetensors")) == [after.path.name]


def test_a_damaged_cache_file_is_converted_again_with_a_notice(tiny_cs_folder, tmp_path,
                                                               caplog):
    cache = tmp_path / "cache"
    manifest = get_manifest("tiny-cs")
    first = load_cached_mlx_lm(manifest, tiny_cs_folder, "q8", mx.float32, 8, cache_dir=cache)
    data = first.path.read_bytes()
    first.path.write_bytes(data[: len(data) // 2])  # cut short, as by a full disk
    rebuilt = load_cached_mlx_lm(manifest, tiny_cs_folder, "q8", mx.float32, 8,
                                 cache_dir=cache)
    assert not rebuilt.from_cache
    assert rebuilt.notice is not None and str(first.path) in rebuilt.notice
    assert "converted again" in rebuilt.notice and rebuilt.notice in caplog.text
    assert rebuilt.path.read_bytes() == data  # the same conversion, written whole again
    np.testing.assert_array_equal(_text_logits(rebuilt.lm), _text_logits(first.lm))
    again = load_cached_mlx_lm(manifest, tiny_cs_folder, "q8", mx.float32, 8, cache_dir=cache)
    assert again.from_cache and again.notice is None


def test_a_file_that_does_not_convert_is_named_with_its_cache_key(tiny_cs_folder, tmp_path):
    folder = _copy(tiny_cs_folder, tmp_path)
    _edit_release(folder, lambda state: state.pop(
        "depformer._orig_mod.layers.0.gating.3.linear_in.weight"))
    source = (folder / RELEASE_WEIGHTS_FILE).resolve()
    with pytest.raises(MlxWeightsError) as error:
        load_cached_mlx_lm(get_manifest("tiny-cs"), folder, "q4", mx.float32, 4,
                           cache_dir=tmp_path / "cache")
    message = str(error.value)
    assert str(source) in message and "cache key" in message and "-q4-float32-v" in message
    assert "missing 1 (depformer.layers.0.gating.3.linear_in.weight)" in message
    assert not list((tmp_path / "cache").glob("*.safetensors"))  # nothing half-written kept


def _reachable(root: object) -> list[object]:
    """Every object `root` holds, through attributes, containers and closures (not through
    classes, modules or functions' globals, which reach the whole program)."""
    skip = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType)
    seen: dict[int, object] = {}
    pending = [root]
    while pending:
        item = pending.pop()
        if id(item) in seen or isinstance(item, skip):
            continue
        seen[id(item)] = item
        pending.extend(gc.get_referents(item))
    return list(seen.values())


def test_the_mlx_engine_holds_no_torch_lm(tiny_cs_folder):
    from app.engine.local_engine import LocalEngine

    checkpoint = load_mlx_checkpoint(get_manifest("tiny-cs"), tiny_cs_folder, "q8")
    engine = LocalEngine(checkpoint)
    held = _reachable(engine)
    assert not [o for o in held if isinstance(o, LMModel)]
    torch_parameters = {id(o): o for o in held if isinstance(o, torch.nn.Parameter)}
    mimi_parameters = {id(p) for p in checkpoint.mimi.parameters()}
    assert set(torch_parameters) == mimi_parameters  # Mimi's, and nothing else torch
