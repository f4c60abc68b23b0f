"""A checkpoint's memory shape, counted from its architecture without loading its weights.

The model is built on torch's `meta` device, which allocates nothing, so a 7B is counted in
about a second on any machine, before anything is downloaded. The architecture comes from
the same places the loader reads it: the folder's config.json when it is on disk, else the
manifest's named architecture (architectures.py), the builder's config for checkpoints the
project builds, moshi's 7B defaults for the legacy layout, or an STT manifest's
`published_config`. The KV rings are counted as the engine widens them for its longest chunk
(app/engine/kv_ring.py).
"""

from __future__ import annotations

import functools
import json
import threading
from pathlib import Path
from typing import Any

import torch
from moshi.models import loaders
from moshi.modules.transformer import StreamingMultiheadAttention

from app.asr.stt_catalog import SttManifest
from app.checkpoints.architectures import lm_architecture, mimi_architecture
from app.checkpoints.catalog import Manifest
from app.checkpoints.tiny_builder import RANDOM_WEIGHTS_MARKER, tiny_lm_config, tiny_mimi_config
from app.moshi_internals import moshi_7b_config
from app.plan.memory_plan import ModelShape

# Allowances, not measurements: a block forward's activations (the 7B's 256-column block:
# logits, attention scores and the feed-forward's hidden, about 0.1 GB), the step's CUDA graph
# pool and the allocator's slack. The recogniser only ever steps one frame at a time.
SPEECH_WORKSPACE_BYTES = 256 * 1024**2
STT_WORKSPACE_BYTES = 64 * 1024**2

# config.json keys that are not LMModel arguments (moshi's CheckpointInfo pops the same).
_NOT_LM_KEYS = ("moshi_name", "mimi_name", "mimi_config_name", "tokenizer_name", "lora_name",
                "model_type", "lm_gen_config", "tts_config", "stt_config", "model_id",
                RANDOM_WEIGHTS_MARKER)
_BUILT_LM_CONFIGS = {"tiny": tiny_lm_config, "moshi-7b-random": moshi_7b_config}
_BUILT_MIMI_CONFIGS = {"tiny": tiny_mimi_config}


def short_name(display_name: str) -> str:
    """"Context Spanning 7B (Mindlogic): asks for ..." -> "Context Spanning 7B"."""
    return display_name.split(" (")[0].split(":")[0].strip()


def _read_json(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    return json.loads(path.read_text(encoding="utf-8"))


def _folder_configs(folder: Path) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """The LM and Mimi configs of a folder's config.json (None, None: it has none)."""
    raw = _read_json(folder / "config.json")
    if raw is None:
        return None, None
    mimi = None
    if raw.get("mimi_config_name"):
        mimi = _read_json(folder / raw["mimi_config_name"])
    lm = {k: v for k, v in raw.items() if k not in _NOT_LM_KEYS}
    return lm, mimi


def _cache_values(module: torch.nn.Module, widen_by: int) -> int:
    """Numbers the attention rings under `module` hold at batch 1 (moshi's RingKVCache is
    [2, B, heads, capacity, head_dim]); rings with a context grow by `widen_by` slots."""
    total = 0
    for attention in module.modules():
        if not isinstance(attention, StreamingMultiheadAttention) or attention.cross_attention:
            continue
        if attention.context is not None:
            capacity = attention.context + widen_by
        else:
            capacity = attention.weights_per_step  # moshi's own rule for a context-less ring
        total += 2 * attention.embed_dim * capacity
    return total


def shape_from_configs(name: str, lm_config: dict[str, Any], mimi_config: dict[str, Any] | None,
                       max_chunk: int, workspace_bytes: int) -> ModelShape:
    """Count an architecture: parameters split into linear weights (what quantization
    shrinks) and the rest, the Mimi codec, and the KV rings with room for `max_chunk`."""
    counts = _counts(json.dumps(lm_config, sort_keys=True),
                     json.dumps(mimi_config, sort_keys=True), max(1, max_chunk))
    return ModelShape(name, *counts, workspace_bytes=workspace_bytes)


# One model built on meta at a time: plans are made on background threads (each settings
# dialog, the first-run dialog, the session's precision choice); the second asker then
# finds the first one's answer in the cache instead of building the same model again.
_META_BUILD = threading.Lock()


def _counts(lm_json: str, mimi_json: str, max_chunk: int) -> tuple[int, int, int, int, int]:
    """(linear, other, codec, cache, codec cache) numbers; see `_counted`."""
    with _META_BUILD:
        return _counted(lm_json, mimi_json, max_chunk)


@functools.lru_cache(maxsize=16)
def _counted(lm_json: str, mimi_json: str, max_chunk: int) -> tuple[int, int, int, int, int]:
    """Cached by the configs' JSON, as a dialog re-plans whenever a setting changes and a 7B
    takes a second to build on meta."""
    # `device="meta"` reaches every parameter and buffer of both (checked), so no
    # `with torch.device("meta")` around it: that mode also routes every initialiser
    # through a Python-level function mode, for nothing.
    lm = loaders.get_moshi_lm(None, lm_kwargs=json.loads(lm_json), device="meta")
    mimi = loaders.get_mimi(None, json.loads(mimi_json), device="meta")
    total = sum(p.numel() for p in lm.parameters())
    linear = sum(m.weight.numel() for m in lm.modules() if isinstance(m, torch.nn.Linear))
    cache = _cache_values(lm.transformer, max_chunk - 1)
    if lm.depformer is not None:
        cache += _cache_values(lm.depformer, 0)
    codec = sum(p.numel() for p in mimi.parameters())
    return linear, total - linear, codec, cache, _cache_values(mimi, 0)


def _manifest_configs(manifest: Manifest, folder: Path
                      ) -> tuple[dict[str, Any], dict[str, Any] | None]:
    lm, mimi = _folder_configs(folder)
    if lm is not None:
        return lm, mimi
    if manifest.architecture is not None:
        return (lm_architecture(manifest.architecture.lm),
                mimi_architecture(manifest.architecture.mimi))
    builder = manifest.builder or ""
    if manifest.source_kind == "built" and builder in _BUILT_LM_CONFIGS:
        mimi_maker = _BUILT_MIMI_CONFIGS.get(builder)
        return _BUILT_LM_CONFIGS[builder](), mimi_maker() if mimi_maker else None
    return moshi_7b_config(), None  # the legacy layout: moshi's own 7B


def max_chunk_of(manifest: Manifest) -> int:
    """The longest chunk the engine widens its rings for (as app/engine/local_engine.py)."""
    if manifest.span_placement.kind == "block":
        return manifest.max_span_tokens
    return manifest.max_chunk_positions


def checkpoint_shape(manifest: Manifest, folder: Path | None = None) -> ModelShape:
    folder = Path(folder) if folder is not None else manifest.default_folder()
    lm, mimi = _manifest_configs(manifest, folder)
    return shape_from_configs(short_name(manifest.display_name), lm, mimi,
                              max_chunk_of(manifest), SPEECH_WORKSPACE_BYTES)


def stt_shape(manifest: SttManifest, folder: Path | None = None) -> ModelShape:
    folder = Path(folder) if folder is not None else manifest.default_folder()
    lm, mimi = _folder_configs(folder)
    if lm is None and manifest.source_kind == "built":
        from app.asr.tiny_stt_builder import tiny_stt_lm_config, tiny_stt_mimi_config

        lm, mimi = tiny_stt_lm_config(), tiny_stt_mimi_config()
    if lm is None:
        if not manifest.published_config:
            raise ValueError(f"STT model {manifest.id!r} is not on disk and its manifest has no "
                             "published_config to size it by")
        lm = dict(manifest.published_config)
    return shape_from_configs("speech recognition", lm, mimi, 1, STT_WORKSPACE_BYTES)
