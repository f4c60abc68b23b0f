"""`python main.py bench asr`: one recogniser for N conversations (serve --slots N --asr),
what it holds and how fast it goes, and what the 1B STT would take.

Measured (the STT given, tiny-stt by default, on this machine): for each N, a recogniser of
N rows (app/asr/recogniser.py), N conversations opened and fed frames of noise in
lock-step (frame f to every row, then wait for all N to have heard it). Reported: the
bytes of the recogniser's streaming state (every tensor of its LM's and Mimi's streaming
states: KV rings, offsets, convolution buffers, at N rows) and of its weights (held once),
the batched steps it ran, and N conversations' frames per second of wall time.

Estimated (no 1B STT is on this machine): Kyutai STT 1B from its manifest's published
configuration, counted on torch's `meta` device (app/plan/footprint.py): its weights in
bf16 held once, plus per row its KV rings (context 750) and Mimi's streaming caches;
beside it what one recogniser per slot, the way `serve --asr` worked before, would hold.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from typing import Any

import numpy as np
import torch
from moshi.modules.transformer import RingKVCache

from app.asr.asr_thread import AsrOptions
from app.asr.recogniser import Recogniser
from app.asr.stt_catalog import LoadedStt, ensure_stt_built, get_stt_manifest, load_stt
from app.frames import FRAME_SAMPLES

ESTIMATED_STT = "kyutai-stt-1b-en_fr"
INCLUDES = {
    "state_bytes": "every tensor of the recogniser's streaming state at N rows (the STT LM's "
                   "KV rings and offsets, Mimi's buffers and rings), summed",
    "weights_bytes": "the STT's parameters (LM and Mimi), held once for every row",
    "frames_per_s": "N conversations' frames a second, lock-step, as fast as taken",
    "estimate": "Kyutai STT 1B, counted from its published configuration (not loaded): "
                "bf16 weights once, plus per row its KV rings (bf16) and Mimi's caches "
                "(float32); per_slot_recognisers: N whole recognisers, as before",
}


def _tensor_bytes(value: object) -> int:
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, RingKVCache):
        return _tensor_bytes(value.cache) + _tensor_bytes(value.end_offset)
    return 0


def _state_bytes(recogniser: Recogniser) -> int:
    total = 0
    for module in (recogniser.model.lm_gen, recogniser.stt.mimi):
        for state in module.get_streaming_state().values():
            if state is None:
                continue
            total += sum(_tensor_bytes(getattr(state, f.name)) for f in dataclasses.fields(state))
    return total


def random_stt(stt_id: str, device: torch.device, dtype: torch.dtype,
               tokenizer: Any) -> LoadedStt:
    """An STT of `stt_id`'s published architecture with random weights on `device` (the 1B
    on a GPU, where no checkpoint can be downloaded): its speed, not its words."""
    from typing import cast

    from moshi.models import loaders

    manifest = get_stt_manifest(stt_id)
    if not manifest.published_config:
        raise ValueError(f"{stt_id} has no published configuration to build")
    lm = loaders.get_moshi_lm(None, lm_kwargs=dict(manifest.published_config), device=device,
                              dtype=dtype)
    mimi = loaders.get_mimi(None, device=device)
    lm.eval()
    mimi.eval()
    return LoadedStt(manifest, manifest.default_folder(), cast(Any, None), mimi, lm, tokenizer,
                     device, dtype, audio_delay_s=0.5, silence_prefix_s=0.0,
                     end_of_speech=None)


def measure_recogniser(stt: LoadedStt, rows: int, frames: int) -> dict[str, Any]:
    """A recogniser of `rows` rows on `stt`, fed `frames` frames of noise in lock-step."""
    weights = sum(p.numel() * p.element_size()
                  for module in (stt.lm, stt.mimi) for p in module.parameters())
    recogniser = Recogniser(stt, rows)
    recogniser.start()
    try:
        if not recogniser.ready.wait(300):
            raise RuntimeError("the recogniser did not start")
        asrs = [recogniser.open(AsrOptions(input_queue_frames=frames + 2)) for _ in range(rows)]
        for asr in asrs:
            assert asr is not None
            asr.start()
        rng = np.random.default_rng(0)
        started = time.perf_counter()
        for index in range(frames):
            pcm = (0.1 * rng.standard_normal(FRAME_SAMPLES)).astype(np.float32)
            for asr in asrs:
                assert asr is not None and asr.push_frame(pcm, timeout=60)
            for asr in asrs:
                assert asr is not None and asr.wait_frames(index + 1, 120)
        wall = time.perf_counter() - started
        state = _state_bytes(recogniser)
        ticks = recogniser.ticks
        for asr in asrs:
            assert asr is not None
            asr.stop(30)
    finally:
        recogniser.stop(30)
    return {"rows": rows, "frames": frames, "state_bytes": state, "weights_bytes": weights,
            "batched_steps": ticks, "frames_per_s": round(rows * frames / wall, 2),
            "frame_ms": round(wall / frames * 1000.0, 3)}


def _measure(stt_id: str, rows: int, frames: int) -> dict[str, Any]:
    manifest = get_stt_manifest(stt_id)
    return measure_recogniser(load_stt(manifest, ensure_stt_built(manifest), "cpu"), rows,
                              frames)


def _estimate(rows: tuple[int, ...]) -> dict[str, Any]:
    from app.plan.footprint import stt_shape

    manifest = get_stt_manifest(ESTIMATED_STT)
    shape = stt_shape(manifest, manifest.default_folder())
    weights = (shape.linear_params + shape.other_params) * 2 + shape.codec_params * 4
    per_row = shape.cache_values * 2 + shape.codec_cache_values * 4
    one = weights + per_row + shape.workspace_bytes
    return {"model": ESTIMATED_STT, "weights_gb": round(weights / 1e9, 3),
            "per_row_gb": round(per_row / 1e9, 4),
            "rows": [{"rows": n, "one_recogniser_gb": round(
                (weights + n * per_row + shape.workspace_bytes) / 1e9, 2),
                "per_slot_recognisers_gb": round(n * one / 1e9, 2)} for n in rows]}


def run_asr_rows_bench(stt_id: str = "tiny-stt", rows: tuple[int, ...] = (1, 8, 32),
                       frames: int = 20) -> dict[str, Any]:
    if not rows or min(rows) < 1 or frames < 1:
        raise ValueError("bench asr takes row counts of 1 or more and at least one frame")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a loaded 2-core machine: one thread, as the server's rows
    try:
        measured = [_measure(stt_id, n, frames) for n in rows]
    finally:
        torch.set_num_threads(threads)
    first = measured[0]
    for row in measured:
        row["state_bytes_per_row"] = row["state_bytes"] // row["rows"]
        row["speedup_over_first"] = round(row["frames_per_s"] / first["frames_per_s"], 2)
    return {"bench": "asr", "stt": stt_id, "measured": measured,
            "estimate": _estimate(rows), "median_frames_per_s": statistics.median(
                [row["frames_per_s"] for row in measured]), "includes": INCLUDES}


def describe(result: dict[str, Any]) -> str:
    lines = [f"one recogniser, {result['stt']} on this machine (one torch thread):"]
    for row in result["measured"]:
        lines.append(f"  {row['rows']:>3} rows: state {row['state_bytes'] / 1e6:8.2f} MB "
                     f"({row['state_bytes_per_row'] / 1e6:.3f} MB a row), weights "
                     f"{row['weights_bytes'] / 1e6:.2f} MB once, {row['batched_steps']} "
                     f"batched steps, {row['frames_per_s']:.1f} frames/s")
    estimate = result["estimate"]
    lines.append(f"estimated, {estimate['model']} (bf16 weights {estimate['weights_gb']} GB "
                 f"once, {estimate['per_row_gb']} GB a row):")
    for row in estimate["rows"]:
        lines.append(f"  {row['rows']:>3} rows: one recogniser {row['one_recogniser_gb']} GB, "
                     f"one per slot {row['per_slot_recognisers_gb']} GB")
    return "\n".join(lines)
