"""`python main.py bench step`: what ONE engine step costs, counted by part, beside stock moshi's
`LMGen.step` on the same weights, on any machine (a CPU counts what a GPU would launch).

For each model and precision it builds a one-row engine (app/engine/local_engine.py, driven
without its thread, as `bench gpu` drives it), starts a conversation, lets the delays fill,
and counts `--steps` steps and full frames (Mimi encode + step + decode) with
app/bench/step_count.py: the operators dispatched (about one GPU kernel each) and the bytes of
weights and KV they take, by part: the temporal transformer, the depformer, sampling, the
columns (ours: the hand-over to the device and back, the bookkeeping itself being numpy on
the host, timed apart; stock's: its token cache on the device) and Mimi. Then the same for
moshi's own `LMGen` on the same LM and Mimi (it drops the user's codebooks when dep_q is 16,
a trap the engine avoids: its operators are what matters here).

With `--compile`, a third engine per model and precision: ours with the step compiled by
torch.compile (EngineOptions.compile_step), its compiled calls counted by torch.profiler
(app/bench/step_count.py): the kernels they launch, in their parts (the codebooks' sampling
fused into the depformer's), and what the compile took.

Models: a catalog id (tiny-cs), or `7b`: PersonaPlex's 7B architecture with random weights.
On a CUDA GPU `7b` is built at full size in bf16 and the GPU's kernels are counted too
(torch.profiler, CUDA graphs as the app runs them). On a CPU it is built at a small width
(`SMALL_WIDTH`: every layer, head, codebook and the context kept, only the widths cut), so its
operators are the 7B's; its bytes are given at the 7B's full width as well, from the same
parameters and rings counted on the full model built on `meta`.

One JSON line per model, precision and engine as soon as it is counted, then the table.
"""

from __future__ import annotations

import functools
import gc
import json
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from moshi.models import LMGen, LMModel, loaders
from moshi.modules.transformer import StreamingMultiheadAttention
from moshi.utils import compile as moshi_compile

from app.bench.step_count import PARTS, PartCount, StepCounter, summed
from app.checkpoints.architectures import personaplex_7b
from app.checkpoints.loader import LoadedCheckpoint
from app.engine.columns import ForcedStep, make_book
from app.engine.device import synchronize
from app.engine.local_engine import LocalEngine
from app.engine.speech_engine import EngineOptions
from app.engine.step_compile import CompiledPiece
from app.engine.torch_runtime import TorchRuntime, layout_of
from app.frames import FRAME_SAMPLES
from app.plan.memory_plan import PRECISIONS

SEVEN_B = "7b"
# The 7B at a small width on a CPU: 32 layers, 32 heads, the depformer's 6 layers and 16
# heads, 16 codebooks, vocabularies and context as they are; widths cut 16 and 8 times.
SMALL_WIDTH = {"dim": 256, "depformer_dim": 128, "depformer_dim_feedforward": 528}
COMPILED = "compiled"  # the engine row of ours with the step compiled (--compile)
SETTLE_STEPS = 4  # past the delays (the first frame out comes at the third step)
MAX_READ = 600  # the rings widened for the release's longest span block, as the engine does
INCLUDES = {
    "operators": "aten operators dispatched per step (views and allocations left out: each "
                 "of the rest is about one kernel on a GPU), by part; step: the LM step "
                 "alone; frame: Mimi encode + step + decode",
    "parts": "temporal: under LMModel.forward_text; depformer: under forward_depformer; "
             "sampling: under moshi's sample_token; columns: the rest of the step (ours: "
             "the columns to the device and the frame back; stock: its token cache on the "
             "device); mimi: Mimi encode and decode",
    "weights_bytes": "bytes of parameters the step's operators take (embeddings: the rows "
                     "looked up), at the precision counted; full_width: the same parameters "
                     "of the 7B built on meta at full width",
    "kv_bytes": "bytes of keys and values the attention operators take: moshi hands them the "
                "whole ring, filled or not (ours is widened for the longest block read)",
    "columns_host_us": "ours only: the numpy bookkeeping of a frame (ForcingColumns "
                       "prepare + commit), median host time",
    "step_ms": "wall time of one step on this machine while counted (the counting slows it: "
               "a count, not a speed)",
    "gpu_kernels": "CUDA only: kernels the GPU ran per step, torch.profiler, CUDA graphs on "
                   "as the app runs them",
    "compiled": "--compile: ours with the step compiled by torch.compile (the temporal "
                "forward's setup, one layer, its end; the depformer's codebook step); each "
                "part counts the kernels its compiled calls launch (fused inductor kernels "
                "and the library ones they call: mm, attention, top-k, random draws), the "
                "depformer's the codebooks' sampling included; compile_s: the first step's "
                "time, the compiles included (from_cache: nothing had to be compiled)",
}


class StepBenchError(ValueError):
    """The bench cannot run as asked."""


@dataclass
class _Built:
    checkpoint: LoadedCheckpoint
    name: str
    full_width: LMModel | None  # the 7B on meta, when the one counted is narrower


def _small_7b_config() -> dict[str, Any]:
    return personaplex_7b() | SMALL_WIDTH


def _build(model: str, device: torch.device, precision: str, seed: int) -> _Built:
    """The model as a loaded checkpoint on `device`, its linears at `precision`."""
    from app.bench.gpu_bench import RELEASE, _catalog_model
    from app.bench.slots_bench import random_checkpoint, stand_in_tokenizer
    from app.engine.quantize import QUANTIZED_PRECISIONS, quantize_linears

    dtype_name = "float32" if precision == "fp32" else "bfloat16"
    dtype = getattr(torch, dtype_name)
    torch.manual_seed(seed)
    full_width = None
    if model == SEVEN_B:
        small = device.type != "cuda"
        config = _small_7b_config() if small else personaplex_7b()
        lm = loaders.get_moshi_lm(None, lm_kwargs=config, device=device, dtype=dtype).eval()
        mimi = loaders.get_mimi(None, None, device=device, num_codebooks=8)
        checkpoint = random_checkpoint(lm, mimi, RELEASE, stand_in_tokenizer(seed=seed))
        name = "7B architecture" + (f" at width {SMALL_WIDTH['dim']}" if small else "")
        if small:
            full_width = loaders.get_moshi_lm(None, lm_kwargs=personaplex_7b(),
                                              device="meta", dtype=dtype)
    else:
        checkpoint, _ids = _catalog_model(model, device, dtype_name)
        name = model
    if precision in QUANTIZED_PRECISIONS:
        quantize_linears(checkpoint.lm, precision, device)
    return _Built(checkpoint, name, full_width)


def _prefix(engine: LocalEngine) -> list[ForcedStep]:
    assert engine.placeholders is not None
    silence = ForcedStep(engine.placeholders.user, engine.placeholders.agent,
                         int(engine.runtime.text_padding_id))
    return [silence] * 6


@contextmanager
def _streaming(engine: LocalEngine) -> Iterator[None]:
    with ExitStack() as stack:
        stack.enter_context(engine.runtime.streaming(1, MAX_READ))
        stack.enter_context(engine.codec.streaming(1))
        engine.codec.join(0)
        yield


def _counted(counter: StepCounter, steps: int, work: Callable[[], object],
             device: torch.device) -> tuple[dict[str, PartCount], float]:
    """`work` run `steps` times under the counter: the parts per step, and the median ms."""
    counts, times = [], []
    for _ in range(steps):
        counter.reset()
        synchronize(device)
        start = time.perf_counter()
        with counter:
            work()
        synchronize(device)
        times.append((time.perf_counter() - start) * 1000.0)
        counts.append(counter.parts)
    total = summed(counts)
    for part in total.values():  # per step
        for key in part.operators:
            part.operators[key] //= steps
        part.views //= steps
        part.weights_bytes //= steps
        part.kv_bytes //= steps
        for key in part.weights_read:
            part.weights_read[key] //= steps
    return total, statistics.median(times)


@dataclass
class Counted:
    """One engine's count: per step, per full frame, the step's time; and with the step
    compiled, what compiling took."""

    step: dict[str, PartCount]
    frame: dict[str, PartCount]
    step_ms: float
    compiled: dict[str, Any] | None = None


def _ours(built: _Built, steps: int, greedy: bool, seed: int, compile_step: bool = False
          ) -> Counted:
    checkpoint = built.checkpoint
    engine = LocalEngine(checkpoint, 1, EngineOptions(greedy=greedy, seed=seed,
                                                      compile_step=compile_step))
    engine.prepare_placeholders()
    random = np.random.default_rng(seed)
    users = random.integers(0, int(checkpoint.lm.card), (64, 1, 8))
    pcm = (0.1 * random.standard_normal((1, FRAME_SAMPLES))).astype(np.float32)
    counter = StepCounter([("lm.", checkpoint.lm), ("mimi.", checkpoint.mimi)])
    frame_index = [0]

    def step() -> None:
        engine.step_rows([0], users[frame_index[0] % 64], [None])
        frame_index[0] += 1

    with _streaming(engine), torch.no_grad(), _eager(checkpoint.lm), ExitStack() as observed:
        engine.runtime.reset_row(0)
        engine.prefill_forced(0, _prefix(engine))
        for _ in range(SETTLE_STEPS):  # the compiled pieces compile on the first
            step()
        for piece in _compiled_pieces(engine):
            observed.enter_context(piece.observed(counter.observing(piece.part)))
        step_parts, step_ms = _counted(counter, steps, step, checkpoint.lm.device)
        frame_parts, _ = _counted(counter, steps,
                                  lambda: engine.model_frame([0], pcm), checkpoint.lm.device)
    compiled = _compile_facts(engine) if compile_step else None
    return Counted(step_parts, frame_parts, step_ms, compiled)


def _stock(built: _Built, steps: int, greedy: bool, seed: int) -> Counted:
    """moshi's own LMGen and Mimi on the same weights."""
    checkpoint = built.checkpoint
    lm, mimi = checkpoint.lm, checkpoint.mimi
    sampling = checkpoint.manifest.sampling
    generator = LMGen(lm, use_sampling=not greedy, temp=sampling.temp,
                      temp_text=sampling.temp_text, top_k=sampling.top_k,
                      top_k_text=sampling.top_k_text)
    user_rows = lm.num_codebooks - lm.dep_q - 1  # 0 with dep_q 16: stock drops the user
    random = torch.Generator().manual_seed(seed)
    device = lm.device
    users = torch.randint(0, int(lm.card), (64, 1, max(user_rows, 0), 1), generator=random)
    pcm = (0.1 * torch.randn(1, 1, FRAME_SAMPLES, generator=random)).to(device)
    counter = StepCounter([("lm.", lm), ("mimi.", mimi)])
    frame_index = [0]

    def step() -> torch.Tensor | None:
        out = generator.step(users[frame_index[0] % 64].to(device))
        frame_index[0] += 1
        return out

    def frame() -> None:
        mimi.encode(pcm)  # the user's codes: stock feeds none of them with dep_q 16
        out = step()
        if out is not None:
            mimi.decode(out[:, 1 : 1 + mimi.num_codebooks])

    torch.manual_seed(seed)
    with generator.streaming(1), mimi.streaming(1), torch.no_grad(), _eager(lm):
        for _ in range(SETTLE_STEPS):
            step()
        step_parts, step_ms = _counted(counter, steps, step, device)
        frame_parts, _ = _counted(counter, steps, frame, device)
    return Counted(step_parts, frame_parts, step_ms)


def _compiled_pieces(engine: LocalEngine) -> list[CompiledPiece]:
    """The runtime's pieces torch.compile compiled (the torch runtime's only)."""
    runtime = engine.runtime
    if not isinstance(runtime, TorchRuntime):
        return []
    return [piece for piece in runtime.compiled_pieces() if piece.compiled]


@contextmanager
def _eager(lm: LMModel) -> Iterator[None]:
    """Operators are counted as they dispatch: a CUDA graph's replay dispatches none."""
    if lm.device.type == "cuda":
        with moshi_compile.no_cuda_graph():
            yield
    else:
        yield


def _columns_host_us(built: _Built, frames: int = 200) -> float:
    """The numpy bookkeeping of one frame, alone: a ForcingColumns book's prepare + commit."""
    layout = layout_of(built.checkpoint.lm)
    book = make_book(built.checkpoint.manifest.generator, layout, 1)
    user = np.arange(8, dtype=np.int64)
    audio = np.arange(layout.dep_q, dtype=np.int64)
    times = []
    for _ in range(frames):
        start = time.perf_counter()
        if book.prepare(0, user) is not None:
            book.commit(0, 3, audio)
        times.append((time.perf_counter() - start) * 1e6)
    return round(statistics.median(times[frames // 4:]), 1)


def _full_width_bytes(parts: dict[str, PartCount], small: LMModel, full: LMModel,
                      precision: str) -> dict[str, dict[str, int]]:
    """The weights and KV the same operators take at the 7B's full width: each parameter
    read counted at its full size (a linear layer's weight at the precision's bits, its
    scales included there), each embedding row at the full width, each ring at its full
    width (same capacity and heads). Mimi is the same at any LM width."""
    spec = PRECISIONS.get(precision, PRECISIONS["bf16"])
    full_params = dict(full.named_parameters())
    linears = {name for name, module in full.named_modules()
               if isinstance(module, torch.nn.Linear)}
    widths = {"temporal": full.dim / small.dim,
              "depformer": _depformer_width(full) / _depformer_width(small)}
    out = {}
    for part, count in parts.items():
        if part == "mimi":
            out[part] = {"weights_bytes": count.weights_bytes, "kv_bytes": count.kv_bytes}
            continue
        weights = 0.0
        for prefixed, reads in count.weights_read.items():
            if not prefixed.startswith("lm."):
                continue
            module, _, leaf = prefixed.removeprefix("lm.").rpartition(".")
            if module in linears:
                if leaf == "weight":  # a quantized layer's scales are in its bits
                    weights += reads * full_params[f"{module}.weight"].numel() \
                        * spec.linear_bits / 8
                continue
            weights += reads * full_params[f"{module}.{leaf}"].numel() * spec.other_bits / 8
        for prefixed, rows in count.rows_read.items():
            table = full_params[prefixed.removeprefix("lm.")]
            weights += rows * table.shape[-1] * spec.other_bits / 8
        out[part] = {"weights_bytes": int(weights),
                     "kv_bytes": int(count.kv_bytes * widths.get(part, 1.0)
                                     * spec.cache_bits / _kv_bits(small, precision))}
    return out


def _depformer_width(lm: LMModel) -> int:
    assert lm.depformer is not None
    return next(m.embed_dim for m in lm.depformer.modules()
                if isinstance(m, StreamingMultiheadAttention))


def _kv_bits(lm: LMModel, precision: str) -> int:
    """Bits of a KV value as counted (the model's float dtype; float16 under moshi's int8)."""
    if precision == "int8":
        return 16
    return torch.finfo(lm.dtype).bits


def _part_rows(parts: dict[str, PartCount]) -> dict[str, dict[str, Any]]:
    return {part: {"operators": count.operator_count, "views": count.views,
                   "weights_bytes": count.weights_bytes, "kv_bytes": count.kv_bytes,
                   "by_name": dict(count.operators.most_common())}
            for part, count in parts.items()}


def _totals(parts: dict[str, dict[str, Any]]) -> dict[str, int]:
    return {key: sum(row[key] for row in parts.values())
            for key in ("operators", "weights_bytes", "kv_bytes")}


def _gpu_kernels(built: _Built, steps: int, greedy: bool, seed: int,
                 compile_step: bool = False) -> int | None:
    """Kernels the GPU runs per step of ours, graphed as the app runs it (CUDA only)."""
    from torch.profiler import ProfilerActivity, profile

    checkpoint = built.checkpoint
    if checkpoint.lm.device.type != "cuda":
        return None
    engine = LocalEngine(checkpoint, 1, EngineOptions(greedy=greedy, seed=seed,
                                                      compile_step=compile_step))
    engine.prepare_placeholders()
    users = np.random.default_rng(seed).integers(0, int(checkpoint.lm.card), (64, 1, 8))
    with _streaming(engine), torch.no_grad():
        engine.runtime.reset_row(0)
        engine.prefill_forced(0, _prefix(engine))
        for i in range(SETTLE_STEPS + 2):  # the graphs are captured on the second call
            engine.step_rows([0], users[i % 64], [None])
        synchronize(checkpoint.lm.device)
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for i in range(steps):
                engine.step_rows([0], users[i % 64], [None])
            synchronize(checkpoint.lm.device)
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    return len(kernels) // steps


def count_model(model: str, precision: str, device: torch.device, steps: int = 2,
                greedy: bool = False, seed: int = 0,
                emit: Callable[[dict[str, Any]], None] | None = None,
                compile_step: bool = False) -> list[dict[str, Any]]:
    """Ours and stock's rows for one model at one precision, and with `compile_step` ours
    compiled (each emitted when counted)."""
    built = _build(model, device, precision, seed)
    rows = []
    engines: list[tuple[str, Callable[..., Any]]] = [("ours", _ours), ("stock", _stock)]
    if compile_step:
        engines.append((COMPILED, functools.partial(_ours, compile_step=True)))
    for engine, count in engines:
        counted = count(built, steps, greedy, seed)
        step_parts, frame_parts, step_ms = counted.step, counted.frame, counted.step_ms
        row: dict[str, Any] = {
            "model": built.name, "precision": precision, "engine": engine,
            "device": str(device), "greedy": greedy, "steps": steps,
            "step": _part_rows(step_parts), "frame": _part_rows(frame_parts),
            "step_ms": round(step_ms, 2)}
        row["step_total"] = _totals(row["step"])
        row["frame_total"] = _totals(row["frame"])
        if built.full_width is not None:
            full = _full_width_bytes(frame_parts, built.checkpoint.lm, built.full_width,
                                     precision)
            row["full_width"] = {"parts": full, **{key: sum(p[key] for p in full.values())
                                                    for key in ("weights_bytes", "kv_bytes")}}
        if engine != "stock":
            row["columns_host_us"] = _columns_host_us(built)
            row["gpu_kernels"] = _gpu_kernels(built, steps, greedy, seed,
                                              compile_step=engine == COMPILED)
        if counted.compiled is not None:
            row["compile"] = counted.compiled
        rows.append(row)
        if emit is not None:
            emit(row)
    del built  # the next precision builds the model again: this one's memory is given back
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return rows


def _compile_facts(engine: LocalEngine) -> dict[str, Any]:
    """What compiling the step took (or that nothing compiled, and why)."""
    runtime = engine.runtime
    group = runtime.step_compile() if isinstance(runtime, TorchRuntime) else None
    pieces = [] if group is None else group.pieces
    compiled = [p.label for p in pieces if p.compiled]
    failures = {p.label: p.failure for p in pieces if p.failure is not None}
    return {"compiled": bool(compiled), "pieces": compiled, "failures": failures,
            "compile_s": None if group is None or group.compile_s is None
            else round(group.compile_s, 1),
            "from_cache": None if group is None else group.from_cache}


def run_step_bench(models: tuple[str, ...] = ("tiny-cs", SEVEN_B),
                   precisions: tuple[str, ...] = ("fp32",), device: str | None = "cpu",
                   steps: int = 2, greedy: bool = False, seed: int = 0,
                   emit: Callable[[dict[str, Any]], None] | None = None,
                   compile_step: bool = False) -> dict[str, Any]:
    from app.engine.device import choose_device
    from app.engine.precision import TORCH_PRECISIONS

    if steps < 1:
        raise StepBenchError("--steps must be at least 1")
    unknown = [p for p in precisions if p not in TORCH_PRECISIONS]
    if unknown:
        raise StepBenchError(f"--precision takes {', '.join(TORCH_PRECISIONS)}, not "
                             f"{', '.join(unknown)}")
    torch_device = choose_device(device)
    began = time.perf_counter()
    rows = []
    for model in models:
        for precision in precisions:
            rows += count_model(model, precision, torch_device, steps, greedy, seed, emit,
                                compile_step)
    return {"bench": "step", "device": str(torch_device), "torch": torch.__version__,
            "rows": rows, "includes": INCLUDES,
            "wall_s": round(time.perf_counter() - began, 1)}


def _gb(n: float) -> str:
    return f"{n / 1e9:.3f}" if n >= 1e7 else f"{n / 1e6:.2f} MB"


def describe(result: dict[str, Any]) -> str:
    """The table: per model, precision and engine, operators and bytes by part."""
    lines = [f"one engine step, counted on {result['device']} (torch {result['torch']}); "
             "operators per step (about one GPU kernel each), weights and KV read (GB)"]
    header = (f"  {'model / precision / engine':<44} {'part':<10} {'step ops':>8} "
              f"{'frame ops':>9} {'weights':>10} {'KV':>10}")
    lines.append(header)
    for row in result["rows"]:
        label = f"{row['model']} / {row['precision']} / {row['engine']}"
        full = row.get("full_width", {}).get("parts", {})
        for part in (*PARTS, "total"):
            if part == "total":
                step_ops = row["step_total"]["operators"]
                frame = row["frame_total"]
                full_part = row.get("full_width")
            else:
                step_ops = row["step"][part]["operators"]
                frame = row["frame"][part]
                full_part = full.get(part)
            if not frame["operators"] and part != "total":
                continue
            weights, kv = _gb(frame["weights_bytes"]), _gb(frame["kv_bytes"])
            if full_part:
                weights = f"{_gb(full_part['weights_bytes'])}*"
                kv = f"{_gb(full_part['kv_bytes'])}*"
            lines.append(f"  {label:<44} {part:<10} {step_ops:>8} {frame['operators']:>9} "
                         f"{weights:>10} {kv:>10}")
            label = ""
        extra = []
        if row.get("columns_host_us") is not None:
            extra.append(f"columns on the host {row['columns_host_us']} us a frame")
        if row.get("gpu_kernels") is not None:
            extra.append(f"GPU kernels a step {row['gpu_kernels']}")
        compiled = row.get("compile")
        if compiled is not None:
            extra.append(f"compiled {len(compiled['pieces'])} pieces in "
                         f"{compiled['compile_s']} s"
                         + (" (from the cache)" if compiled["from_cache"] else "")
                         if compiled["compiled"] else f"not compiled: {compiled['failures']}")
        extra.append(f"step {row['step_ms']} ms here while counted")
        lines.append(f"  {'':<44} {'; '.join(extra)}")
    if any("full_width" in row for row in result["rows"]):
        lines.append("  * at the 7B's full width: the same parameters and rings, full size")
    lines.append(f"  wall {result['wall_s']} s; what each number includes: --json")
    return "\n".join(lines)


def emit_line(row: dict[str, Any]) -> None:
    """One row on stderr as soon as it is counted (a time limit keeps what was)."""
    print(f"step {json.dumps(row)}", file=sys.stderr, flush=True)
