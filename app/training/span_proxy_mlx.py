"""The span-reading proof on the MLX engine: the trained proxy, converted, reads spans there
as it does on torch (issue 18's capability check).

The proxy is saved in the real layout (span_proxy_checkpoint.py) and loaded back through
the MLX engine's loader (`load_mlx_checkpoint`: the torch loader's parts plus the LM
converted strictly by weights.py, quantized at load for q8/q4). Every measure of the torch
evaluation is then run again, on the same questions and the same streams (they depend on
the seeds only), through the inference path the engine drives on MLX: vanilla Moshi's
column bookkeeping (columns.StockColumns) over the MLX runtime (mlx_runtime.py), greedy,
each span read as the engine reads span positions, ONE multi-position forward through the
MLX transformer and its KV ring (sized for the longest span, as torch's rings are widened).
The model's audio codes are teacher-forced exactly as torch's evaluation forces them
(`teacher_forced_inputs`: given as the model's codes, = LMGen's depformer_replace_tokens).
Each of the B streams runs as its own conversation, one after another.

Agreement with torch fp32 is counted over every run of every measure: the text tokens, and
the answers (each question's answer window, the per-question prediction).
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from moshi.models import LMModel

from app.checkpoints.catalog import Manifest
from app.checkpoints.loader import load_checkpoint
from app.engine.columns import ZERO_TOKEN, StockColumns
from app.engine.mlx.checkpoint import load_mlx_checkpoint
from app.engine.mlx.lm import MlxLm
from app.engine.mlx.mlx_runtime import MlxRuntime, layout_of
from app.engine.mlx.sampling import Sampling
from app.training.span_proxy import (
    CHUNKED,
    Evaluation,
    ProxyTask,
    Question,
    evaluate,
    stream_codes,
    teacher_forced_inputs,
)

GREEDY = Sampling(greedy=True)


def run_streams_mlx(lm: MlxLm, task: ProxyTask, questions: Sequence[Sequence[Question]],
                    mode: str, seed: int) -> torch.Tensor:
    """run_streams on MLX: the same streams and spans, text tokens [B, T] (the text of
    frame t, chosen at step t)."""
    codes, injections = stream_codes(task, questions, seed)
    batch, _, frames = codes.shape
    user, audio = teacher_forced_inputs(codes, lm.shape.delays)
    longest = max((len(ids) for ids in injections.values()), default=1)
    texts = torch.empty(batch, frames, dtype=torch.long)
    runtime = MlxRuntime(lm, GREEDY)
    book = StockColumns(layout_of(lm), 1)

    def read(ids: Sequence[int]) -> None:
        columns = np.full((lm.shape.num_codebooks, len(ids)), ZERO_TOKEN, dtype=np.int64)
        columns[0] = ids
        runtime.read(0, columns)

    with runtime.streaming(1, longest if mode == CHUNKED else 1):
        for b in range(batch):
            runtime.reset_row(0)
            book.reset(0)
            stream_user, stream_audio = user[b].T.tolist(), audio[b].T.tolist()  # [T, 8] each
            for step in range(frames):
                ids = injections.get(step)
                if ids:
                    if mode == CHUNKED:
                        read(ids)  # the whole span: one forward
                    else:
                        for token in ids:
                            read([token])
                columns = book.prepare(0, stream_user[step], stream_audio[step])
                assert columns is not None  # the stock book always runs a frame
                text, sampled = runtime.step([0], [columns])
                book.commit(0, int(text[0]), sampled[0])
                texts[b, step] = int(text[0])
    return texts


def agreement(reference: Evaluation, other: Evaluation) -> dict:
    """Fractions of `other`'s text tokens and answers equal to `reference`'s, run by run."""
    if reference.spans != other.spans or len(reference.texts) != len(other.texts):
        raise AssertionError("the two evaluations did not ask the same questions")
    same = total = 0
    for ref, text in zip(reference.texts, other.texts, strict=True):
        same += int((ref == text).sum())
        total += ref.numel()
    answers = sum(a == b for a, b in zip(reference.answers, other.answers, strict=True))
    return {"tokens": round(same / max(1, total), 4),
            "answers": round(answers / max(1, len(reference.answers)), 4),
            "tokens_compared": total, "answers_compared": len(reference.answers)}


def _same_weights(a: LMModel, b: LMModel) -> bool:
    left, right = a.state_dict(), b.state_dict()
    return left.keys() == right.keys() and all(torch.equal(left[k], right[k]) for k in left)


def check_mlx_loads(manifest: Manifest, folder: Path, precisions: Sequence[str]) -> None:
    """Load the base checkpoint on MLX at each precision (converted into a temporary cache):
    before minutes of training, a machine where the MLX path does not load says so."""
    for precision in precisions:
        with tempfile.TemporaryDirectory(prefix="span-proxy-mlx-") as cache:
            load_mlx_checkpoint(manifest, folder, precision, cache_dir=Path(cache))


def evaluate_on_mlx(manifest: Manifest, folder: Path, trained: LMModel, task: ProxyTask,
                    torch_eval: Evaluation, precisions: Sequence[str], questions: int,
                    seed: int, split: str, multi_pairs: Sequence[int], deep: bool,
                    distances: bool) -> tuple[dict, dict]:
    """Every measure on MLX at each precision, from the checkpoint in `folder`. Returns
    ({precision: {"eval": ..., "agreement_with_torch_fp32": ...}}, {precision: seconds}).
    The converted weights are cached in a temporary folder, not the data dir's cache: the
    proof converts the file each time and leaves nothing behind."""
    if not _same_weights(load_checkpoint(manifest, folder, "cpu").lm, trained):
        raise AssertionError(f"{folder}: the saved LM is not the one trained")
    out, seconds = {}, {}
    for precision in precisions:
        with tempfile.TemporaryDirectory(prefix="span-proxy-mlx-") as cache:
            checkpoint = load_mlx_checkpoint(manifest, folder, precision, cache_dir=Path(cache))
        mlx_lm = checkpoint.mlx_lm

        def on_mlx(batch: Sequence[Sequence[Question]], mode: str, stream_seed: int,
                   lm: MlxLm = mlx_lm) -> torch.Tensor:
            return run_streams_mlx(lm, task, batch, mode, stream_seed)

        start = time.perf_counter()
        results, ev = evaluate(trained, task, questions, seed, split, multi_pairs, deep,
                               distances, runner=on_mlx)
        seconds[precision] = round(time.perf_counter() - start, 1)
        out[precision] = {"eval": results,
                          "agreement_with_torch_fp32": agreement(torch_eval, ev)}
    return out, seconds
