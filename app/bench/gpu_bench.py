"""`python main.py bench gpu`: the 7B's real-time numbers on a CUDA GPU, and the checks that
only a GPU can make.

By default it builds PersonaPlex's architecture (Moshi 7B with a depformer over 16 codebooks)
with RANDOM weights directly on the GPU in bf16, and moshi's own Mimi with random weights:
speed does not depend on the weights, and nothing is downloaded or written to disk. It then
measures, with device synchronisation, what the reference reports ("prefill plus one step"
for span blocks of several sizes) and checks on the GPU, in bf16:
- that a block read in ONE forward gives the next frames that a one-position-at-a-time read
  gives (twin runs from one saved streaming state: numbers, not assertions);
- that moshi's CUDA-graphed step still replays correctly after a block (the block's forward
  runs eagerly on the tensors the graph was captured on): the same run, graphed and eager.

`--model tiny-cs --allow-cpu` runs every path on the CPU, for tests.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any, TypedDict

import moshi
import numpy as np
import torch
from moshi.models import LMModel, MimiModel, loaders
from moshi.modules.streaming import StreamingModule
from moshi.modules.transformer import RingKVCache
from moshi.utils import compile as moshi_compile

from app.asr.stt_catalog import LoadedStt
from app.checkpoints.architectures import personaplex_7b
from app.checkpoints.catalog import get_manifest
from app.checkpoints.loader import LoadedCheckpoint, ensure_built, load_checkpoint, runtime_dtype
from app.engine.columns import ColumnBook, ForcedStep
from app.engine.conversation_start import Placeholders
from app.engine.device import choose_device, synchronize
from app.engine.local_engine import LocalEngine
from app.engine.span_block import block_columns
from app.engine.speech_engine import EngineOptions
from app.engine.torch_runtime import TorchRuntime
from app.frames import FRAME_MS, FRAME_SAMPLES
from app.moshi_internals import copy_ring, cuda_graphs_enabled, restore_ring, torch_compile_enabled

RELEASE = "context-spanning-7b"  # its manifest holds the release's placeholder codes and ids
PREFIX_STEPS = 50  # a persona-like start: silence, 48 text frames, silence
SETTLE_STEPS = 3  # live frames after the start, before a block
CHECK_STEPS = 5  # frames compared after a block
FIRST_TEXT_ID = 14  # random span text stays clear of the control ids (<ret> 4, 12, 13)
class _Reference(TypedDict):
    source: str
    ms: dict[int, float]  # n -> prefill plus step


REFERENCE: _Reference = {
    "source": "Context Spanning README@c05344f: prefill plus one step, RTX PRO 6000 "
              "Blackwell, the trained 7B in bf16 (n = 0: a step alone)",
    "ms": {0: 34.7, 16: 56.1, 64: 57.5, 256: 62.0, 600: 86.1},
}
INCLUDES = {
    "step_ms": "one generator step (temporal forward over 1 position + 16 depformer steps, "
               "greedy; CUDA-graphed on CUDA), LM only, synchronised before and after, "
               "median of N",
    "frame_ms": "one full frame: Mimi encode of 1920 samples + the generator step + Mimi "
                "decode of the model's 8 codebooks, synchronised, median of N",
    "prefill_ms": "inject_block alone: the temporal forward over [pending column] + "
                  "the block's first n - 1 columns (on CUDA ONE forward padded to a "
                  "CUDA-graphed size: position_forwards.py), plus the ring bookkeeping; "
                  "synchronised, median over `repeats` fresh blocks",
    "prefill_plus_step_ms": "inject_block then the NEXT generator step, timed together "
                            "(the reference's 'prefill plus one step'), median over repeats",
    "over_budget": f"prefill_plus_step_ms > {FRAME_MS:g} ms, one frame (the reference's "
                   "slot.over_budget)",
    "context_restarts": "times the conversation restarted (reset + prefix) so that no "
                        "position ever left the context window; max_positions: the most "
                        "positions the context held",
    "exact": f"twin runs from one saved streaming state: the block in one forward against "
             f"one position per forward, then the same {CHECK_STEPS} greedy steps; max |diff| "
             "of their text logits, that over the largest |logit|, and whether the steps' "
             "text tokens and whole frames (text + 16 codebooks) are identical",
    "graph_replay": f"the same run (prefix, {SETTLE_STEPS} steps, a block of the largest "
                    f"size, {CHECK_STEPS} steps) from one saved state, once with moshi's CUDA "
                    "graphs and once eagerly (moshi's no_cuda_graph()), greedy, same inputs; "
                    "compares the steps after the block. cuda_graphs: whether the graphed run "
                    "really replayed captured graphs (never on a CPU)",
    "peak_memory_gb": "torch.cuda.max_memory_allocated over the whole bench (weights, KV "
                      "rings, a saved state), GiB; null on a CPU",
    "wall_s": "the whole bench, model build included",
}


class GpuBenchError(ValueError):
    """The bench cannot run as asked (no GPU, a block that does not fit, ...)."""


@dataclass
class _Rig:
    """Everything one bench drives: a one-row engine (its frame, step and reads, without
    its thread) on the LM, and the inputs."""

    engine: LocalEngine
    runtime: TorchRuntime
    lm: LMModel
    device: torch.device
    open_id: int
    close_id: int
    prefix: tuple[ForcedStep, ...]
    users: np.ndarray  # [U, 1, 8] int64: live user frames, cycled
    pcm: np.ndarray  # [1, 1920] float32: the frame Mimi encodes
    random: torch.Generator  # CPU generator for span text
    next_user: int = 0
    restarts: int = 0
    max_positions: int = 0

    @property
    def context(self) -> int:
        assert self.lm.context is not None, "the rig's models have a context window"
        return self.lm.context

    @property
    def positions(self) -> int:
        """Positions forwarded into the context: the offset counts the pending column."""
        return max(0, int(self.engine.book.offset[0]) - 1)


# ---- saving and restoring a streaming state ------------------------------------------------


@dataclass
class _Saved:
    """Copies of every tensor and number in the LM's streaming states (and the column
    book's arrays, `_SavedBook`).

    Restoring copies the tensors back IN PLACE: a captured CUDA graph reads the KV rings and
    offsets at their addresses, so the state objects must stay the same objects.
    """

    entries: list[tuple[object, str, object, object]] = field(default_factory=list)

    @classmethod
    def take(cls, modules: list[StreamingModule]) -> _Saved:
        saved = cls()
        for module in modules:
            for state in module.get_streaming_state().values():
                for name, value in vars(state).items():
                    if name.startswith("_"):
                        continue
                    copy = _copy_value(value)
                    if copy is not _SKIP:
                        saved.entries.append((state, name, value, copy))
        return saved

    def restore(self) -> None:
        for state, name, original, copy in self.entries:
            current = getattr(state, name)
            if isinstance(original, RingKVCache) and current is original:
                assert isinstance(copy, tuple)  # what copy_ring made
                restore_ring(original, copy)
            elif isinstance(original, torch.Tensor) and current is original:
                assert isinstance(copy, torch.Tensor)  # its clone
                original.copy_(copy)
            else:  # plain numbers, None, or tensors no graph holds (the pending exit)
                setattr(state, name, _copy_value(copy))


_SKIP = object()


@dataclass
class _SavedBook:
    """The column book's ring, flags and offsets, written back in place."""

    book: ColumnBook
    arrays: tuple[np.ndarray, np.ndarray, np.ndarray]
    pending: list[tuple[int, int] | None]

    @classmethod
    def take(cls, book: ColumnBook) -> _SavedBook:
        return cls(book, (book.ring.copy(), book.provided.copy(), book.offset.copy()),
                   list(book.pending_exit))

    def restore(self) -> None:
        for target, saved in zip((self.book.ring, self.book.provided, self.book.offset),
                                 self.arrays, strict=True):
            np.copyto(target, saved)
        self.book.pending_exit[:] = self.pending


def _save(rig: _Rig) -> tuple[_Saved, _SavedBook]:
    return _Saved.take([rig.lm]), _SavedBook.take(rig.engine.book)


def _restore(saved: tuple[_Saved, _SavedBook]) -> None:
    saved[0].restore()
    saved[1].restore()


def _copy_value(value: object) -> object:
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, RingKVCache):
        return copy_ring(value)
    if isinstance(value, tuple) and all(isinstance(v, torch.Tensor) for v in value):
        return tuple(v.clone() for v in value)
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return _SKIP  # graphs, exit stacks, the model itself: shared, not state to copy


# ---- building the rig ------------------------------------------------------------------------


def _resolve_device(device: str | None, allow_cpu: bool) -> torch.device:
    try:
        torch_device = choose_device(device)
    except ValueError as exc:
        raise GpuBenchError(str(exc)) from exc
    if torch_device.type != "cuda" and not allow_cpu:
        raise GpuBenchError(f"bench gpu needs a CUDA GPU, and runs on {torch_device.type} "
                            "only with --allow-cpu (for testing the command's paths)")
    return torch_device


def _random_7b(device: torch.device, dtype: torch.dtype) -> tuple[LMModel, MimiModel,
                                                                   Placeholders, tuple[int, int]]:
    """PersonaPlex's 7B (dep_q 16) and Mimi with random weights, built on the device."""
    release = get_manifest(RELEASE)
    agent, user = release.span_placement.agent_codes, release.span_placement.user_codes
    if agent is None or user is None:
        raise GpuBenchError(f"the {RELEASE} manifest names no placeholder codes")
    lm = loaders.get_moshi_lm(None, lm_kwargs=personaplex_7b(), device=device, dtype=dtype)
    mimi = loaders.get_mimi(None, None, device=device, num_codebooks=8)
    ids = (release.span_wrapping.open_ids[0], release.span_wrapping.close_ids[0])
    return lm.eval(), mimi, Placeholders(agent, user), ids


def _catalog_model(model: str, device: torch.device, dtype: str
                   ) -> tuple[LoadedCheckpoint, tuple[int, int]]:
    """A catalog checkpoint through the real loader (tiny-cs is built if missing)."""
    manifest = get_manifest(model)
    if manifest.generator != "forcing" or manifest.span_placement.kind != "block":
        raise GpuBenchError(f"{model} is not read with span blocks by the forcing generator; "
                            "choose tiny-cs or context-spanning-7b")
    ck = load_checkpoint(manifest, ensure_built(manifest), device, runtime_dtype(dtype, device))
    wrapping = manifest.span_wrapping
    return ck, (wrapping.open_ids[0], wrapping.close_ids[0])


def _prefix(placeholders: Placeholders, pad_id: int, text_card: int, length: int,
            random: torch.Generator) -> tuple[ForcedStep, ...]:
    """Silence, persona-like text one token per frame, silence: every row forced."""
    silence = ForcedStep(placeholders.user, placeholders.agent, pad_id)
    text = torch.randint(FIRST_TEXT_ID, text_card, (max(0, length - 2),), generator=random)
    persona = [ForcedStep(placeholders.user, placeholders.agent, int(i)) for i in text]
    return (silence, *persona, silence)


# ---- driving it ------------------------------------------------------------------------------


def _step(rig: _Rig) -> np.ndarray | None:
    user = rig.users[rig.next_user % rig.users.shape[0]]
    rig.next_user += 1
    return rig.engine.step_rows([0], user, [None])[0]


def _frame(rig: _Rig) -> None:
    """What the engine does every 80 ms: Mimi encode, a step, Mimi decode."""
    rig.engine.model_frame([0], rig.pcm)


def _start(rig: _Rig, live_steps: int = SETTLE_STEPS) -> None:
    """A fresh conversation: empty context, the prefix, a few live frames."""
    rig.engine.book.reset(0)
    rig.runtime.reset_row(0)
    rig.engine.prefill_forced(0, rig.prefix)
    rig.next_user = 0
    for _ in range(live_steps):
        _step(rig)


def _block(rig: _Rig, n: int) -> list[int]:
    """A span block's n ids: open id, n - 2 random text ids, close id."""
    text = torch.randint(FIRST_TEXT_ID, int(rig.lm.text_card), (n - 2,), generator=rig.random)
    return [rig.open_id, *text.tolist(), rig.close_id]


def _read_block(rig: _Rig, ids: list[int], positions_per_forward: int | None = None) -> None:
    """The block as the engine reads it (ONE forward), or in pieces of
    `positions_per_forward` (1: one position at a time, what the one forward equals)."""
    if positions_per_forward is None:
        rig.engine.read_block(0, ids)
        return
    assert rig.engine.placeholders is not None
    block = block_columns(ids, rig.engine.placeholders, rig.lm.num_codebooks)
    columns = rig.engine.book.block(0, block)
    for start in range(0, columns.shape[1], positions_per_forward):
        rig.runtime.read(0, columns[:, start : start + positions_per_forward])


def _timed_ms(rig: _Rig, fn: Callable[[], object]) -> float:
    synchronize(rig.device)
    start = time.perf_counter()
    fn()
    synchronize(rig.device)
    return (time.perf_counter() - start) * 1000.0


def _note_positions(rig: _Rig) -> None:
    rig.max_positions = max(rig.max_positions, rig.positions)


def _steps_after(rig: _Rig, before: Callable[[], object]) -> tuple[list[torch.Tensor],
                                                                      list[np.ndarray]]:
    """Run `before`, then CHECK_STEPS live steps; their text logits and frames out."""
    with rig.runtime.recording_text_logits() as logits:
        before()
        del logits[:]  # only the steps after `before`
        frames = []
        for _ in range(CHECK_STEPS):
            out = _step(rig)
            assert out is not None, "a step after the start returns a frame"
            frames.append(out.copy())
    return logits, frames


def _compare(a: tuple[list[torch.Tensor], list[np.ndarray]],
             b: tuple[list[torch.Tensor], list[np.ndarray]]) -> dict[str, Any]:
    logits_a, logits_b = torch.stack(a[0]), torch.stack(b[0])
    frames_a, frames_b = torch.from_numpy(np.stack(a[1])), torch.from_numpy(np.stack(b[1]))
    finite = bool(torch.isfinite(logits_a).all() and torch.isfinite(logits_b).all())
    diff = float((logits_a - logits_b).abs().max())
    scale = float(logits_a.abs().max())
    return {
        "steps": len(a[1]),
        "finite": finite,  # otherwise the numbers below are null (JSON has no NaN)
        "max_abs_diff": diff if finite else None,
        "logit_scale": scale if finite else None,
        "max_rel_diff": (diff / scale if scale > 0 else diff) if finite else None,
        "text_tokens_agree": bool(torch.equal(frames_a[:, 0], frames_b[:, 0])),
        "frames_agree": bool(torch.equal(frames_a, frames_b)),
    }


# ---- the measurements --------------------------------------------------------------------


def _warm_up(rig: _Rig, blocks: tuple[int, ...]) -> None:
    """Capture the step's graphs and pay for each block size's first forward (slow once)."""
    _start(rig, live_steps=4)
    for n in blocks:
        if rig.positions + n + 2 > rig.context:
            _start(rig)
        _read_block(rig, _block(rig, n))
        _step(rig)
    for _ in range(4):
        _frame(rig)
    synchronize(rig.device)


def _time_steps(rig: _Rig, count: int) -> tuple[float, float]:
    """Median ms of a generator step and of a full frame."""
    _start(rig)
    steps, frames = [], []
    for _ in range(count):
        if rig.positions + 2 > rig.context:
            _start(rig)
        steps.append(_timed_ms(rig, lambda: _step(rig)))
        frames.append(_timed_ms(rig, lambda: _frame(rig)))
    return statistics.median(steps), statistics.median(frames)


def _time_block(rig: _Rig, n: int, repeats: int) -> dict[str, Any]:
    _start(rig)
    rig.restarts, rig.max_positions = 0, 0
    prefill, total = [], []
    for _ in range(repeats):
        block = _block(rig, n)
        if rig.positions + n + 2 > rig.context:  # keep every position inside the window
            _start(rig)
            rig.restarts += 1
        synchronize(rig.device)
        start = time.perf_counter()
        _read_block(rig, block)
        synchronize(rig.device)
        injected = time.perf_counter()
        _step(rig)
        synchronize(rig.device)
        prefill.append((injected - start) * 1000.0)
        total.append((time.perf_counter() - start) * 1000.0)
        _step(rig)  # a plain frame between two blocks, as in a conversation
        _note_positions(rig)
    prefill_plus_step = statistics.median(total)
    return {
        "n": n,
        "prefill_ms": round(statistics.median(prefill), 3),
        "prefill_plus_step_ms": round(prefill_plus_step, 3),
        "over_budget": prefill_plus_step > FRAME_MS,
        "repeats": repeats,
        "context_restarts": rig.restarts,
        "max_positions": rig.max_positions,
    }


def _exactness(rig: _Rig, n: int) -> dict[str, Any]:
    """One forward against one position per forward, from the same saved state."""
    _start(rig)
    block = _block(rig, n)
    saved, user = _save(rig), rig.next_user
    one_pass = _steps_after(rig, lambda: _read_block(rig, block))
    _restore(saved)
    rig.next_user = user  # the same user frames again
    one_by_one = _steps_after(rig, lambda: _read_block(rig, block, positions_per_forward=1))
    return _compare(one_pass, one_by_one)


def _graphs_used(rig: _Rig) -> bool:
    # moshi's own switch (NO_CUDA_GRAPH, no_cuda_graph()); a graph exists once captured.
    return (rig.device.type == "cuda" and cuda_graphs_enabled()
            and rig.runtime.graphs_captured())


def _graph_replay(rig: _Rig, n: int) -> dict[str, Any]:
    """The same run with CUDA graphs and eagerly; the steps after the block must agree."""
    _start(rig, live_steps=0)
    block = _block(rig, n)
    saved = _save(rig)

    def run() -> tuple[list[torch.Tensor], list[np.ndarray]]:
        rig.next_user = 0
        for _ in range(SETTLE_STEPS):
            _step(rig)
        return _steps_after(rig, lambda: _read_block(rig, block))

    graphed = run()
    used = _graphs_used(rig)
    _restore(saved)
    with moshi_compile.no_cuda_graph():
        eager = run()
    return {"cuda_graphs": used, "block": n, **_compare(graphed, eager)}


def _environment(device: torch.device, dtype: torch.dtype) -> dict[str, Any]:
    cuda = device.type == "cuda"
    return {
        "device": f"cuda ({torch.cuda.get_device_name(device)})" if cuda else str(device),
        "device_name": torch.cuda.get_device_name(device) if cuda else None,
        "dtype": str(dtype).removeprefix("torch."),
        "torch": torch.__version__,
        "cuda": torch.version.cuda if cuda else None,
        "moshi": moshi.__version__,
        # moshi decides at import (NO_TORCH_COMPILE) whether to wrap its hot functions.
        "torch_compile": torch_compile_enabled(),
    }


def _comparison(step_ms: float, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    ours = {0: step_ms} | {row["n"]: row["prefill_plus_step_ms"] for row in rows}
    return [{"n": n, "reference_ms": ms, "ours_ms": ours.get(n)}
            for n, ms in REFERENCE["ms"].items()]


def _check_request(blocks: tuple[int, ...], repeats: int) -> None:
    if repeats < 1:
        raise GpuBenchError("--repeats must be at least 1")
    if not blocks:
        raise GpuBenchError("give at least one block size")
    for n in blocks:
        if n < 2:
            raise GpuBenchError(f"a block holds its open and close ids: {n} is too small")


def _check_fit(blocks: tuple[int, ...], context: int, prefix: int) -> None:
    for n in blocks:
        if prefix + SETTLE_STEPS + n + CHECK_STEPS + 2 > context:
            raise GpuBenchError(f"a block of {n} does not fit the context of {context} "
                                f"positions after a start of {prefix} frames")


@contextmanager
def streaming_for_blocks(rig: _Rig, blocks: tuple[int, ...]) -> Iterator[None]:
    """The rig streaming, its rings widened for the longest block's widest forward, once
    the blocks are known to fit its context."""
    _check_fit(blocks, rig.context, len(rig.prefix))
    with ExitStack() as stack:
        stack.enter_context(rig.runtime.streaming(1, max(blocks)))
        stack.enter_context(rig.engine.codec.streaming(1))
        rig.engine.codec.join(0)
        yield


@torch.no_grad()
def run_gpu_bench(
    model: str | None = None,
    device: str | None = None,
    dtype: str = "bfloat16",
    blocks: tuple[int, ...] = (16, 64, 256, 400, 600),
    repeats: int = 7,
    allow_cpu: bool = False,
    seed: int = 0,
    slots: tuple[int, ...] = (),
    slot_frames: int = 40,
    stop_at_first_miss: bool = False,
    asr: str | None = None,
    compile_step: bool = False,
) -> dict[str, Any]:
    """`slots`: slot counts of an engine to run with every row talking (slots_bench.py),
    after the blocks; a model not read with span blocks (tiny) runs the slots alone.
    `stop_at_first_miss`: no count after the first that fails or misses the frame. `asr`:
    an STT whose recogniser runs at each slot count too (not on disk: its published
    architecture with random weights). `compile_step`: the blocks' engine with its step
    compiled by torch.compile (`--compile`; compiled in the warm-up, which the figure
    "compile" then describes)."""
    began = time.perf_counter()
    torch_device = _resolve_device(device, allow_cpu)
    blocks = tuple(dict.fromkeys(int(n) for n in blocks))  # in order, once each
    _check_request(blocks, repeats)
    if slots and model is not None and get_manifest(model).span_placement.kind != "block":
        return _slots_alone(model, torch_device, dtype, slots, slot_frames, seed, began,
                            stop_at_first_miss, asr)
    if model is None and torch_device.type != "cuda":
        raise GpuBenchError("the random 7B is built on a CUDA GPU only (about 16 GB); on "
                            "a CPU use --model tiny-cs --allow-cpu")
    torch_dtype = runtime_dtype(dtype, torch_device)
    cuda = torch_device.type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats(torch_device)
    # The seed makes the random weights repeatable; the caller's RNG state is left alone.
    with torch.random.fork_rng(devices=[torch_device] if cuda else []):
        torch.manual_seed(seed)
        result = _run(model, torch_device, torch_dtype, dtype, blocks, repeats, seed, began,
                      compile_step)
        if slots:
            result["slots"] = _slots(model, torch_device, torch_dtype, dtype, slots,
                                     slot_frames, seed, stop_at_first_miss, asr)
            result["wall_s"] = round(time.perf_counter() - began, 3)
        return result


def emit_figure(kind: str, record: dict[str, Any]) -> None:
    """One figure as a JSON line on stderr the moment it is measured: a run a time limit
    cuts short keeps every figure it had (the device scripts keep stderr)."""
    print(json.dumps({"figure": kind, **record}), file=sys.stderr, flush=True)


def _stt(stt_id: str, device: torch.device, torch_dtype: torch.dtype, seed: int) -> LoadedStt:
    """The STT to run beside the slots: built or on disk, else random weights."""
    from app.asr.stt_catalog import ensure_stt_built, get_stt_manifest, load_stt
    from app.bench.asr_rows_bench import random_stt
    from app.bench.slots_bench import stand_in_tokenizer
    from app.checkpoints.catalog import CatalogError

    manifest = get_stt_manifest(stt_id)
    try:
        folder = ensure_stt_built(manifest) if manifest.source_kind == "built" else \
            manifest.default_folder()
        return load_stt(manifest, folder, device, torch_dtype)
    except (CatalogError, FileNotFoundError, OSError):
        return random_stt(stt_id, device, torch_dtype, stand_in_tokenizer(seed=seed))


def _slots(model: str | None, device: torch.device, torch_dtype: torch.dtype, dtype: str,
           counts: tuple[int, ...], frames: int, seed: int, stop_at_first_miss: bool = False,
           asr: str | None = None) -> dict[str, Any]:
    """The slot counts on an engine of the same model, built again (the blocks' rig
    is gone: its memory is not counted against the slots)."""
    import gc

    from app.bench.slots_bench import random_checkpoint, run_slots_bench, stand_in_tokenizer

    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    if model is None:
        tokenizer = stand_in_tokenizer(seed=seed)
        lm, mimi, _placeholders, _ids = _random_7b(device, torch_dtype)
        checkpoint = random_checkpoint(lm, mimi, RELEASE, tokenizer)
    else:
        manifest = get_manifest(model)
        checkpoint = load_checkpoint(manifest, ensure_built(manifest), device,
                                     runtime_dtype(dtype, device))
    stt = None if asr is None else _stt(asr, device, torch_dtype, seed)
    return run_slots_bench(checkpoint, counts, frames, seed=seed,
                           progress=lambda row: emit_figure("slots", row),
                           stop_at_first_miss=stop_at_first_miss, asr=stt)


def _slots_alone(model: str, device: torch.device, dtype: str, counts: tuple[int, ...],
                 frames: int, seed: int, began: float, stop_at_first_miss: bool = False,
                 asr: str | None = None) -> dict[str, Any]:
    """A model not read with span blocks: its slots, and no block figures."""
    torch_dtype = runtime_dtype(dtype, device)
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(seed)
        slots = _slots(model, device, torch_dtype, dtype, counts, frames, seed,
                       stop_at_first_miss, asr)
    return {"bench": "gpu", "model": model, **_environment(device, torch_dtype),
            "seed": seed, "budget_ms": FRAME_MS, "blocks": None,
            "note": f"{model} is not read with span blocks: the block figures need tiny-cs "
                    "or the 7B",
            "slots": slots, "wall_s": round(time.perf_counter() - began, 3)}


def _run(model: str | None, torch_device: torch.device, torch_dtype: torch.dtype, dtype: str,
         blocks: tuple[int, ...], repeats: int, seed: int, began: float,
         compile_step: bool = False) -> dict[str, Any]:
    rig, model_name = _build_rig(model, torch_device, torch_dtype, dtype, seed, compile_step)
    built_s = time.perf_counter() - began
    with streaming_for_blocks(rig, blocks):
        measured = _measure(rig, blocks, repeats)
    lm = rig.lm
    cuda = torch_device.type == "cuda"
    return {
        "bench": "gpu",
        "model": model_name,
        **_environment(torch_device, torch_dtype),
        "architecture": {"dim": int(lm.dim), "num_layers": len(lm.transformer.layers),
                         "dep_q": int(lm.dep_q), "context": rig.context,
                         "parameters_b": round(sum(p.numel() for p in lm.parameters()) / 1e9,
                                               3)},
        "seed": seed,
        "prefix_steps": len(rig.prefix),
        "budget_ms": FRAME_MS,
        **measured,
        "peak_memory_gb": round(torch.cuda.max_memory_allocated(torch_device) / 2**30, 3)
        if cuda else None,
        "reference": {"source": REFERENCE["source"],
                      "ms": {str(n): ms for n, ms in REFERENCE["ms"].items()}},
        "comparison": _comparison(measured["step_ms"], measured["blocks"]),
        "includes": INCLUDES,
        "build_s": round(built_s, 3),
        "wall_s": round(time.perf_counter() - began, 3),
    }


def _build_rig(model: str | None, device: torch.device, torch_dtype: torch.dtype, dtype: str,
               seed: int, compile_step: bool = False) -> tuple[_Rig, str]:
    from app.bench.slots_bench import random_checkpoint, stand_in_tokenizer

    if model is None:
        lm, mimi, _placeholders, (open_id, close_id) = _random_7b(device, torch_dtype)
        checkpoint = random_checkpoint(lm, mimi, RELEASE, stand_in_tokenizer(seed=seed))
        name = "personaplex-7b architecture, random weights"
    else:
        checkpoint, (open_id, close_id) = _catalog_model(model, device, dtype)
        lm, name = checkpoint.lm, model
    engine = LocalEngine(checkpoint, 1, EngineOptions(
        greedy=True, compile_step=compile_step,
        warmup_notice=lambda said: emit_figure("compiling", {"said": said})))
    engine.prepare_placeholders()
    assert engine.placeholders is not None and isinstance(engine.runtime, TorchRuntime)
    random = torch.Generator().manual_seed(seed)
    users = torch.randint(0, int(lm.card), (64, 1, 8), generator=random).numpy()
    pcm = (0.1 * torch.randn(1, FRAME_SAMPLES, generator=random)).numpy()
    assert lm.context is not None, "the rig's models have a context window"
    prefix = _prefix(engine.placeholders, lm.text_padding_token_id, int(lm.text_card),
                     min(PREFIX_STEPS, lm.context // 4), random)
    return _Rig(engine, engine.runtime, lm, device, open_id, close_id, prefix, users, pcm,
                random), name


def _measure(rig: _Rig, blocks: tuple[int, ...], repeats: int) -> dict[str, Any]:
    """Every number of the report, on a streaming rig whose rings fit the largest block."""
    _warm_up(rig, blocks)
    compiled = _compile_figure(rig)
    if compiled is not None:
        emit_figure("compile", compiled)
    step_ms, frame_ms = _time_steps(rig, max(20, 4 * repeats))
    emit_figure("step", {"step_ms": round(step_ms, 3), "frame_ms": round(frame_ms, 3)})
    rows = []
    for n in blocks:
        rows.append(_time_block(rig, n, repeats))
        emit_figure("block", rows[-1])
    for row in rows:
        row["exact"] = _exactness(rig, row["n"])
        emit_figure("exactness", {"n": row["n"], **row["exact"]})
    graph_replay = _graph_replay(rig, max(blocks))
    return {
        "cuda_graphs": _graphs_used(rig),
        "compile": compiled,
        "step_ms": round(step_ms, 3),
        "frame_ms": round(frame_ms, 3),
        "blocks": rows,
        "graph_replay": graph_replay,
    }


def _compile_figure(rig: _Rig) -> dict[str, Any] | None:
    """What compiling the step took (None: not asked)."""
    group = rig.runtime.step_compile()
    if group is None:
        return None
    return {"pieces": [p.label for p in group.pieces if p.compiled],
            "failures": {p.label: p.failure for p in group.pieces if p.failure is not None},
            "compile_s": None if group.compile_s is None else round(group.compile_s, 1),
            "from_cache": group.from_cache}


def _number(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def describe(result: dict[str, Any]) -> str:
    """The readable table `bench gpu` prints without --json."""
    from app.bench.slots_bench import describe_slots

    if result.get("blocks") is None:  # a model without blocks: its slots alone
        return "\n".join([f"{result['model']} on {result['device']} ({result['dtype']}), "
                          f"torch {result['torch']}, moshi {result['moshi']}",
                          *describe_slots(result["slots"]),
                          f"  wall {result['wall_s']:.1f} s"])
    lines = [
        f"{result['model']} on {result['device']} ({result['dtype']}), torch "
        f"{result['torch']}, moshi {result['moshi']}, CUDA graphs {result['cuda_graphs']}",
        f"  step {result['step_ms']:.2f} ms (LM only), full frame {result['frame_ms']:.2f} ms "
        f"(Mimi + LM); reference step {REFERENCE['ms'][0]} ms",
        f"  {'block':>6} {'prefill':>9} {'+ step':>9} {'reference':>10} {'over 80':>8} "
        f"{'max |diff|':>11} {'rel':>9} {'tokens':>7}",
    ]
    reference = {row["n"]: row["reference_ms"] for row in result["comparison"]}
    for row in result["blocks"]:
        exact = row["exact"]
        ref = reference.get(row["n"])
        lines.append(
            f"  {row['n']:>6} {row['prefill_ms']:>9.2f} {row['prefill_plus_step_ms']:>9.2f} "
            f"{_number(ref, '.1f'):>10} {str(row['over_budget']):>8} "
            f"{_number(exact['max_abs_diff'], '.3e'):>11} "
            f"{_number(exact['max_rel_diff'], '.2e'):>9} {str(exact['frames_agree']):>7}")
    replay = result["graph_replay"]
    lines.append(f"  graphed step after a block of {replay['block']}: max |diff| "
                 f"{_number(replay['max_abs_diff'], '.3e')} against eager, frames agree "
                 f"{replay['frames_agree']}")
    if "slots" in result:
        lines += describe_slots(result["slots"])
    lines.append(f"  peak GPU memory {_number(result['peak_memory_gb'], '.2f')} GiB, "
                 f"wall {result['wall_s']:.1f} s")
    return "\n".join(lines)
