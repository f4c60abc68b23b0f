"""The MLX LM converted once and kept: a safetensors file in the data dir, reused on the next
load, rebuilt when its source changes.

Converting a 7B reads 15 GB of torch weights, transposes nothing but copies all of it, and
quantizes every linear layer: a minute or more each start, and the torch tensors' memory
while it runs. The converted file (already at 8 or 4 bits) loads in seconds. It is keyed by
- the source weight file's SHA-256 and the LM config's (a new download or a hand edit of
  either is a new key);
- the precision and the dtype under it (q8 on a GPU is bf16 underneath, on a CPU fp32);
- CONVERTER_VERSION, raised whenever conversion changes what it writes.
The key is in the file's name and again in its metadata, which is checked on read. Hashing
15 GB takes a while too, so each source's hash is remembered beside the cache with the
file's size and modification time, and read again only when one of them changes.

A cache file that cannot be read (cut short by a full disk, damaged) is converted again, and
the notice says so; a cache that cannot be written leaves the conversion in use (notice
too). Files converted from an earlier version of the same source are removed when the new
one is written, so the cache holds one file per checkpoint folder and precision.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import struct
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlx.core as mx

from app.checkpoints.catalog import Manifest
from app.engine.mlx.lm import LmShape, MlxLm
from app.engine.mlx.weights import MlxWeightsError, lm_config_of, load_mlx_lm, quantize
from app.paths import converted_weights_dir

log = logging.getLogger(__name__)

CONVERTER_VERSION = 1  # raise when the conversion (weights.py) changes what it writes
_HASHES_FILE = "source-hashes.json"
_SUFFIX = ".safetensors"
_HASH_CHUNK = 8 * 1024 * 1024
_DTYPE_NAMES = {mx.float32: "float32", mx.bfloat16: "bfloat16"}

Progress = Callable[[str], None]


@dataclass(frozen=True)
class CacheKey:
    source_sha256: str  # of the weight file
    config_sha256: str  # of the LM config it was built with
    precision: str  # fp32, bf16, q8, q4
    dtype: str  # the float dtype (under q8/q4: of what is not quantized)
    converter: int = CONVERTER_VERSION

    def text(self) -> str:
        return (f"{self.source_sha256[:16]}-{self.config_sha256[:8]}-{self.precision}-"
                f"{self.dtype}-v{self.converter}")

    def metadata(self) -> dict[str, str]:
        return {"source_sha256": self.source_sha256, "config_sha256": self.config_sha256,
                "precision": self.precision, "dtype": self.dtype,
                "converter": str(self.converter)}


@dataclass(frozen=True)
class CachedLm:
    lm: MlxLm
    path: Path  # the cache file (it may be missing when it could not be written)
    key: CacheKey
    source: Path  # the torch weight file
    from_cache: bool  # True: read from the cache, no conversion ran
    notice: str | None = None  # a cache that was rebuilt or could not be written


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(_HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def source_sha256(path: Path, cache_dir: Path) -> str:
    """The file's SHA-256, remembered by its size and modification time (a changed file is
    hashed again)."""
    stat = path.stat()
    memo_path = cache_dir / _HASHES_FILE
    try:
        memo = json.loads(memo_path.read_text(encoding="utf-8"))
        if not isinstance(memo, dict):
            memo = {}
    except (OSError, ValueError):
        memo = {}
    name = str(path.resolve())
    seen = memo.get(name)
    if (isinstance(seen, dict) and seen.get("size") == stat.st_size
            and seen.get("mtime_ns") == stat.st_mtime_ns and isinstance(seen.get("sha256"), str)):
        return seen["sha256"]
    sha = _sha256(path)
    memo[name] = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": sha}
    with contextlib.suppress(OSError):  # only a speed-up: the hash is right either way
        _write_atomically(memo_path, json.dumps(memo, indent=1).encode("utf-8"))
    return sha


def _write_atomically(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def read_metadata(path: Path, whole: bool = False) -> dict[str, str]:
    """A safetensors file's metadata, from its header alone (the weights are not read).
    `whole`: also check that the file holds every byte its header promises (mlx maps the
    file and would read a file cut short without an error)."""
    with open(path, "rb") as handle:
        size_bytes = handle.read(8)
        if len(size_bytes) != 8:
            raise ValueError("the file ends before its header")
        (size,) = struct.unpack("<Q", size_bytes)
        if size > 100 * 1024 * 1024:
            raise ValueError(f"a header of {size} bytes is not a safetensors header")
        header = json.loads(handle.read(size))
    if not isinstance(header, dict):
        raise ValueError("its header is not a table of tensors")
    if whole:
        ends = [int(entry["data_offsets"][1]) for name, entry in header.items()
                if name != "__metadata__"]
        expected = 8 + size + max(ends, default=0)
        actual = path.stat().st_size
        if actual != expected:
            raise ValueError(f"it holds {actual} bytes where its header promises {expected}")
    metadata = header.get("__metadata__", {})
    return {str(k): str(v) for k, v in metadata.items()}


def cache_path(cache_dir: Path, manifest: Manifest, key: CacheKey) -> Path:
    return cache_dir / f"{manifest.id}-{key.text()}{_SUFFIX}"


def _read_cached(path: Path, key: CacheKey, config: dict[str, Any], bits: int | None) -> MlxLm:
    """The LM from its cache file; ValueError (or mlx's own error) when it does not hold
    exactly this key's weights."""
    metadata = read_metadata(path, whole=True)
    expected = key.metadata()
    wrong = sorted(k for k, v in expected.items() if metadata.get(k) != v)
    if wrong:
        raise ValueError(f"its metadata does not match the key ({', '.join(wrong)})")
    arrays = mx.load(str(path))
    assert isinstance(arrays, dict)  # a safetensors file holds named arrays
    model = MlxLm(LmShape.from_config(config))  # lazy: its random init is never computed
    if bits is not None:
        quantize(model, bits, evaluate=False)  # the quantized layers' structure only
    model.load_weights(list(arrays.items()), strict=True)  # every key, every shape
    mx.eval(model.parameters())
    return model


def _save(model: MlxLm, path: Path, key: CacheKey, source: Path) -> None:
    from mlx.utils import tree_flatten

    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=_SUFFIX)
    os.close(fd)
    try:
        arrays = dict(tree_flatten(model.parameters()))
        mx.save_safetensors(tmp, arrays, metadata={**key.metadata(), "source": str(source)})
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _remove_stale(cache_dir: Path, manifest: Manifest, key: CacheKey, source: Path,
                  keep: Path) -> None:
    """Files converted from an earlier version of `source` at this precision."""
    for other in cache_dir.glob(f"{manifest.id}-*{_SUFFIX}"):
        if other == keep:
            continue
        try:
            metadata = read_metadata(other)
        except (OSError, ValueError):
            continue  # not ours to judge: a file being written by another load
        if (metadata.get("source") == str(source) and metadata.get("precision") == key.precision
                and metadata.get("dtype") == key.dtype):
            with contextlib.suppress(OSError):
                other.unlink()


def load_cached_mlx_lm(manifest: Manifest, folder: Path, precision: str, dtype: mx.Dtype,
                       bits: int | None, *, cache_dir: Path | None = None,
                       on_progress: Progress | None = None) -> CachedLm:
    """The checkpoint's LM on MLX at `precision`, from the cache when it holds this key,
    else converted (MlxWeightsError naming the file and the key when it does not convert)
    and cached."""
    cache_dir = Path(cache_dir) if cache_dir is not None else converted_weights_dir()
    config, source = lm_config_of(manifest, Path(folder))
    source = source.resolve()
    say = on_progress or (lambda _message: None)
    say(f"Checking {source.name} against the converted weights…")
    config_sha = hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()
    key = CacheKey(source_sha256(source, cache_dir), config_sha, precision,
                   _DTYPE_NAMES.get(dtype, str(dtype)))
    path = cache_path(cache_dir, manifest, key)
    notice: str | None = None
    if path.is_file():
        try:
            return CachedLm(_read_cached(path, key, config, bits), path, key, source, True)
        except Exception as exc:  # damaged or foreign: converted again below
            notice = (f"The converted weights {path} could not be read ({exc}); they were "
                      f"converted again from {source}.")
            log.warning("%s", notice)
            with contextlib.suppress(OSError):
                path.unlink()
    say(f"Converting {source.name} for MLX ({precision}); the result is kept for next time…")
    try:
        model = load_mlx_lm(manifest, Path(folder), dtype, bits)
    except MlxWeightsError as exc:
        raise MlxWeightsError(f"{source} does not convert to the MLX LM (cache key "
                              f"{key.text()}): {exc}") from exc
    try:
        _save(model, path, key, source)
        _remove_stale(cache_dir, manifest, key, source, keep=path)
    except OSError as exc:
        written = (f"The converted weights could not be kept in {cache_dir} "
                   f"({exc.strerror or exc}); the next start converts them again.")
        log.warning("%s", written)
        notice = f"{notice} {written}" if notice else written
    return CachedLm(model, path, key, source, False, notice)
