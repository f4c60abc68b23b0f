"""The peer in the same run: stock moshi's `LMGen.step` at batch B on the same weights.

`bench gpu --slots` puts beside each slot count what moshi itself does with the same LM at
the same batch: one `LMGen.step` per frame for B streams, its temporal forward and depformer
CUDA-graphed as moshi graphs them, no spans, no column bookkeeping of ours, no Mimi. Our
frame against this plain batched step, as a ratio, says what the one engine adds (its
bookkeeping, Mimi, the hand-offs) and what batching itself costs.

The LM must not be streaming (our engine on it has stopped). A checkpoint whose depformer
also predicts the user's codebooks (dep_q 16, PersonaPlex's family) is stepped with no user
input: stock LMGen samples all 16 (it cannot drive such a model in a conversation, which is
why the engine has its own generator), but the work per step is the same.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch
from moshi.models import LMGen, LMModel

from app.engine.device import synchronize

INCLUDES = ("stock moshi LMGen.step at the same batch on the same weights: the temporal "
            "forward and the depformer (graphed by moshi on CUDA), sampling; no spans, no "
            "bookkeeping of ours, no Mimi; p50 over the timed steps")


@torch.no_grad()
def stock_step_ms(lm: LMModel, batch: int, steps: int = 20, warm: int = 4,
                  seed: int = 0) -> dict[str, Any]:
    """Milliseconds per `LMGen.step` for `batch` streams (p50 and p99 of `steps`)."""
    generator = LMGen(lm, use_sampling=True, temp=0.8, temp_text=0.7)
    needed = lm.num_codebooks - lm.dep_q - 1  # the user's codebooks stock LMGen takes
    random = torch.Generator().manual_seed(seed)
    times: list[float] = []
    with generator.streaming(batch):
        for index in range(warm + steps):
            codes = torch.randint(0, int(lm.card), (batch, needed, 1), generator=random)
            codes = codes.to(lm.device)
            synchronize(lm.device)
            start = time.perf_counter()
            generator.step(codes)
            synchronize(lm.device)
            if index >= warm:
                times.append((time.perf_counter() - start) * 1000.0)
    return {"batch": batch, "step_ms_p50": round(float(np.percentile(times, 50)), 3),
            "step_ms_p99": round(float(np.percentile(times, 99)), 3), "steps": steps}
