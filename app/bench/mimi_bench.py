"""`python main.py bench mimi`: one 80 ms frame through Mimi (encode, then decode its codes),
torch's on the CPU and MLX's (the GPU on Apple Silicon), streamed frame by frame, with how
many of their codes agree (all of them: tests/engine/mlx/test_mlx_mimi.py). The numbers a
Mac user needs to see what `--mimi auto` chose: the README's Mac figures are estimates.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from moshi.models import loaders

from app.checkpoints.catalog import get_manifest
from app.checkpoints.loader import checkpoint_info, ensure_built
from app.checkpoints.tiny_builder import RANDOM_WEIGHTS_MARKER
from app.frames import FRAME_MS, FRAME_SAMPLES, SAMPLE_RATE
from app.moshi_internals import moshi_7b_config, moshi_mimi_config

WARMUP_FRAMES = 2


def run_mimi_bench(model_id: str, frames: int = 12, folder: Path | None = None
                   ) -> dict[str, Any]:
    """Medians over `frames` frames (after WARMUP_FRAMES) of each Mimi's encode + decode."""
    import mlx.core as mx

    from app.engine.mlx.mlx_mimi import MlxMimi

    if frames < 1:
        raise ValueError("--frames must be at least 1")
    manifest = get_manifest(model_id)
    folder = ensure_built(manifest, folder)
    info = checkpoint_info(manifest, folder)
    per_side = int((info.lm_config or moshi_7b_config())["n_q"]) // 2
    config = info.mimi_config or moshi_mimi_config()
    random_weights = bool(info.raw_config and info.raw_config.get(RANDOM_WEIGHTS_MARKER))
    torch_mimi = loaders.get_mimi(None if random_weights else info.mimi_weights,
                                  info.mimi_config, device="cpu", num_codebooks=per_side)
    if random_weights:
        mlx_mimi = MlxMimi.from_torch(torch_mimi, config)
    else:
        assert info.mimi_weights is not None
        mlx_mimi = MlxMimi.load(Path(info.mimi_weights), config, per_side)
    t = np.arange((frames + WARMUP_FRAMES) * FRAME_SAMPLES) / SAMPLE_RATE
    pcm = (0.3 * np.sin(2 * np.pi * (200 + 100 * np.sin(t)) * t)).astype(np.float32)
    torch_s, mlx_s, agree = [], [], []
    with torch.no_grad(), torch_mimi.streaming(1):
        for index in range(frames + WARMUP_FRAMES):
            frame = pcm[index * FRAME_SAMPLES : (index + 1) * FRAME_SAMPLES]
            start = time.perf_counter()
            codes = torch_mimi.encode(torch.from_numpy(frame)[None, None])
            torch_mimi.decode(codes)
            torch_s.append(time.perf_counter() - start)
            start = time.perf_counter()
            mlx_codes = mlx_mimi.encode_frame(frame)
            mlx_mimi.decode_frame(mlx_codes)  # returns numpy: its work is done
            mlx_s.append(time.perf_counter() - start)
            agree.append(float((codes[0, :, 0].numpy() == mlx_codes).mean()))
    return {
        "model": manifest.id, "frames": frames, "codebooks": per_side,
        "torch_ms": 1000 * statistics.median(torch_s[WARMUP_FRAMES:]),
        "torch_threads": torch.get_num_threads(),
        "mlx_ms": 1000 * statistics.median(mlx_s[WARMUP_FRAMES:]),
        "mlx_device": "gpu" if mx.default_device() == mx.gpu else "cpu",
        "code_agreement": statistics.fmean(agree), "frame_ms": FRAME_MS,
    }


def describe(result: dict[str, Any]) -> str:
    return (f"Mimi of {result['model']} ({result['codebooks']} codebooks), encode + decode of "
            f"one {result['frame_ms']:.0f} ms frame, median of {result['frames']}: torch (CPU, "
            f"{result['torch_threads']} threads) {result['torch_ms']:.1f} ms, MLX "
            f"({result['mlx_device']}) {result['mlx_ms']:.1f} ms; codes agree "
            f"{100 * result['code_agreement']:.1f} %")
