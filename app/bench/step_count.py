"""Counting what torch runs, by part of a step: the operators dispatched and the bytes of
weights and KV they take. The counting half of `bench step` (app/bench/step_bench.py).

A `TorchDispatchMode` sees every aten operator below autograd, as the device runs it
(`linear` is already `t` + `mm` there), on any device. Each operator is given to the part of
the step whose code called it, read off the Python stack:
- "sampling": under moshi's `sample_token` (the text and each codebook);
- "depformer": under a `forward_depformer` (one codebook step: moshi's LMModel's, or the
  engine's fixed-slot one, app/engine/depformer_step.py);
- "temporal": under `LMModel.forward_text` (embeddings, the transformer, the text head);
- "mimi": under moshi's Mimi (`moshi/models/compression.py`);
- "columns": anything else in the step: ours, the columns' hand-over to the device and the
  frame's way back (the bookkeeping itself is numpy on the host, app/engine/columns.py);
  stock moshi's, its token cache on the device (scatter, gather, where).
Views, aliases and allocations launch nothing and are not counted as operators; every other
operator is about one kernel on a GPU (a CUDA graph replays them without the host's launch
cost, but each still runs, one after another).

A piece compiled by torch.compile (app/engine/step_compile.py) dispatches no aten operator
this mode could see for what it fused (and under the mode torch.compile would run it
uncompiled): its calls are counted apart (`StepCounter.observing`), the mode set aside, by
torch.profiler: each kernel it launches (a fused inductor kernel, or a library one it calls:
mm, attention, top-k, random draws), and the weights and KV its arguments hold. On a CPU,
inductor names its C++ kernels to the profiler only when compiled with
`cpp.enable_kernel_profile`, which app/engine/step_compile.py asks for.

Bytes, per part:
- weights: the bytes of the model's parameters each operator takes (an embedding table:
  only the rows it looks up), so a weight read twice is counted twice;
- kv: the bytes of keys and values each attention operator takes (moshi hands the whole
  ring to the attention, filled or not: the mask hides the empty slots).
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes
from torch.utils._pytree import tree_flatten

PARTS = ("temporal", "depformer", "sampling", "columns", "mimi")
_NO_KERNEL = {"empty", "empty_strided", "empty_like", "new_empty", "_unsafe_view", "detach",
              "lift_fresh", "alias", "set_", "resize_", "sym_size", "sym_stride",
              "sym_numel", "sym_storage_offset", "_local_scalar_dense", "is_nonzero"}
_VIEWS = {"view", "reshape", "_reshape_alias", "as_strided", "select", "slice", "unsqueeze",
          "squeeze", "expand", "permute", "transpose", "t", "resolve_conj", "resolve_neg",
          "unbind", "split", "narrow"}
_COMPILED_GRAPH = "## Call CompiledFxGraph"  # the profiler's record of a compiled graph's call
_FUSED = re.compile(r"(cpp_fused|triton_|fused_)")
FUSED_KERNEL = "fused (inductor)"
_ATTENTION = "scaled_dot_product"
_EMBEDDING = "embedding"
_FRAMES = 80  # how far up the stack a part is looked for


def _part(frame: Any) -> str:
    """The part whose code is on the stack above the dispatcher (innermost first)."""
    found = "columns"
    depth = 0
    while frame is not None and depth < _FRAMES:
        code = frame.f_code
        name, path = code.co_name, code.co_filename
        if path.endswith("sampling.py") and "moshi" in path:
            return "sampling"
        if name == "forward_depformer":
            return "depformer"
        if name == "forward_text":
            return "temporal"
        if path.endswith("compression.py") and "moshi" in path:
            found = "mimi"  # an LM call inside Mimi's would be its own; Mimi has none
        frame = frame.f_back
        depth += 1
    return found


@dataclass
class PartCount:
    operators: Counter[str] = field(default_factory=Counter)  # aten name -> calls
    views: int = 0  # dispatched but launch nothing
    weights_bytes: int = 0
    kv_bytes: int = 0
    weights_read: Counter[str] = field(default_factory=Counter)  # parameter name -> reads
    rows_read: Counter[str] = field(default_factory=Counter)  # embedding table -> rows

    @property
    def operator_count(self) -> int:
        return sum(self.operators.values())


class StepCounter(TorchDispatchMode):
    """While entered, every aten operator dispatched is counted into its part (`parts`)."""

    def __init__(self, modules: Iterable[tuple[str, torch.nn.Module]]) -> None:
        super().__init__()
        self.parts: dict[str, PartCount] = {part: PartCount() for part in PARTS}
        # every parameter by its storage: an operator taking a view of it reads it
        self._parameters: dict[int, str] = {}
        for prefix, module in modules:
            for name, parameter in module.named_parameters():
                self._parameters[parameter.untyped_storage().data_ptr()] = f"{prefix}{name}"

    def reset(self) -> None:
        self.parts = {part: PartCount() for part in PARTS}

    def observing(self, part: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """A wrapper for a compiled piece (CompiledPiece.observed): each call runs with this
        counter set aside, its kernels read by torch.profiler and counted into `part`, with
        the weights its modules hold and the KV rings it is given ([2, B, H, capacity, D])."""

        def wrap(compiled: Callable[..., Any]) -> Callable[..., Any]:
            def counted(*args: Any) -> Any:
                on_cuda = any(isinstance(t, torch.Tensor) and t.is_cuda
                              for t in tree_flatten(args)[0])
                activities = [ProfilerActivity.CUDA] if on_cuda else [ProfilerActivity.CPU]
                with _disable_current_modes(), profile(activities=activities) as prof:
                    out = compiled(*args)
                    if on_cuda:
                        torch.cuda.synchronize()
                count = self.parts[part]
                count.operators.update(_compiled_kernels(prof, on_cuda))
                self._count_arguments(count, args)
                return out

            return counted

        return wrap

    def _count_arguments(self, count: PartCount, args: tuple) -> None:
        """The bytes a compiled call reads: its modules' parameters (an embedding table:
        the rows looked up, one per batch row) and the KV rings among its tensors."""
        leaves = tree_flatten(args)[0]
        rings = [t for t in leaves if isinstance(t, torch.Tensor) and t.dim() == 5
                 and self._parameters.get(t.untyped_storage().data_ptr()) is None]
        batch = int(rings[0].shape[1]) if rings else 1
        count.kv_bytes += sum(t.numel() * t.element_size() for t in rings)
        for module in (leaf for leaf in leaves if isinstance(leaf, torch.nn.Module)):
            embedding = isinstance(module, torch.nn.Embedding)
            for parameter in module.parameters():
                owner = self._parameters.get(parameter.untyped_storage().data_ptr())
                if owner is None:
                    continue
                if embedding:
                    count.rows_read[owner] += batch
                    count.weights_bytes += batch * parameter.shape[-1] \
                        * parameter.element_size()
                else:
                    count.weights_read[owner] += 1
                    count.weights_bytes += parameter.numel() * parameter.element_size()

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        part = self.parts[_part(sys._getframe(1))]
        name = func.overloadpacket.__name__
        if func.is_view or name in _NO_KERNEL:
            part.views += 1
            return out
        part.operators[name] += 1
        tensors = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        if _EMBEDDING in name:  # the table's rows it looks up, not the table
            table = tensors[0]
            owner = self._parameters.get(table.untyped_storage().data_ptr())
            if owner is not None and isinstance(out, torch.Tensor):
                part.weights_bytes += out.numel() * out.element_size()
                part.rows_read[owner] += out.numel() // table.shape[-1]
            return out
        for tensor in tensors:
            if tensor.device.type == "meta":
                continue
            owner = self._parameters.get(tensor.untyped_storage().data_ptr())
            if owner is not None:
                part.weights_bytes += tensor.numel() * tensor.element_size()
                part.weights_read[owner] += 1
        if _ATTENTION in name and len(tensors) >= 3:  # (query, key, value, ...)
            part.kv_bytes += sum(t.numel() * t.element_size() for t in tensors[1:3])
        return out


def summed(counts: Iterable[dict[str, PartCount]]) -> dict[str, PartCount]:
    """Parts added over several counts (steps)."""
    total = {part: PartCount() for part in PARTS}
    for count in counts:
        for part, value in count.items():
            into = total[part]
            into.operators.update(value.operators)
            into.views += value.views
            into.weights_bytes += value.weights_bytes
            into.kv_bytes += value.kv_bytes
            into.weights_read.update(value.weights_read)
            into.rows_read.update(value.rows_read)
    return total


def _compiled_kernels(prof: profile, on_cuda: bool) -> Counter[str]:
    """Kernels a compiled call ran: on CUDA every GPU kernel; on a CPU what each compiled
    graph's call ran directly (its fused kernels and the library operators it called,
    allocations and views left out)."""
    names: Counter[str] = Counter()
    for event in prof.events():
        if on_cuda:
            if event.device_type != torch.autograd.DeviceType.CUDA:
                continue
        else:
            parent = event.cpu_parent
            if parent is None or not parent.name.startswith(_COMPILED_GRAPH):
                continue
        name = event.name.removeprefix("aten::")
        if _FUSED.search(name):
            names[FUSED_KERNEL] += 1
        elif name not in _NO_KERNEL and name not in _VIEWS:
            names[name] += 1
    return names
