"""A piece of the engine's step compiled by torch.compile (inductor): fewer, bigger kernels.

A step of the 7B dispatched ~9,300 operators (`bench step`; the H200 ran ~9,500 kernels a
step), most of them small elementwise ones whose launches cost more than their work. Inductor
fuses each run of them into one generated kernel (C++ on a CPU, Triton on a GPU), between the
products it leaves to the libraries (mm, attention). The CUDA graph stays: the compiled piece
is what the engine's CUDAGraphed captures (compile inside, graph outside, as moshi does).

Compiled on its first calls (the engine's warm-up: a piece may need more than one graph,
e.g. the depformer's first codebook step embeds the text, the others a code), which take a
while, so the start says so, before and after (`notify`: the engine's log, and the
session's warm-up state). Inductor's compiled graphs and kernels are
kept in the app's data dir (app/paths.py: compiled_kernels_dir) unless TORCHINDUCTOR_CACHE_DIR
says otherwise: a second start only traces the piece again and reads the rest from there.

Nothing here fails a start: where torch.compile cannot compile (no C++ compiler, no Triton,
an unsupported operator) the piece runs uncompiled, and the log says why. Once settled (after
the warm-up's first step) it never compiles again mid-conversation (a recompile would stall
a frame for seconds): were its guards to fail, that call runs uncompiled (torch.compiler's
"eager_on_recompile").

Greedy tokens equal the uncompiled path's on the tiny checkpoints; logits agree to float
rounding (tests/engine/test_step_compile.py). Random draws are the uncompiled path's own
(inductor's `fallback_random`): sampling consumes the same generator the same way.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

from app.paths import compiled_kernels_dir

log = logging.getLogger(__name__)

Notify = Callable[[str], None]
CACHE_DIR_VARIABLE = "TORCHINDUCTOR_CACHE_DIR"
# Inductor's options for a piece: the random draws the uncompiled path makes (an aten
# exponential_ per sampled codebook), so seeds and tokens mean what they meant; on a CPU its
# C++ kernels named to torch.profiler (`bench step` counts them; idle, a flag's test).
InductorOptions = dict[str, str | int | bool | Callable[..., Any]]  # torch.compile's options
INDUCTOR_OPTIONS: InductorOptions = {"fallback_random": True}
CPU_OPTIONS: InductorOptions = {"cpp.enable_kernel_profile": True}


def use_compile_cache() -> str:
    """Where inductor keeps what it compiled: the app's data dir, unless the environment
    already chose (TORCHINDUCTOR_CACHE_DIR)."""
    if not os.environ.get(CACHE_DIR_VARIABLE):
        folder = compiled_kernels_dir()
        folder.mkdir(parents=True, exist_ok=True)
        os.environ[CACHE_DIR_VARIABLE] = str(folder)
    return os.environ[CACHE_DIR_VARIABLE]


def _cache_misses() -> int:
    """Graphs inductor compiled so far for want of them in its cache (none: every graph was
    read from the cache, or already compiled in this process)."""
    from torch._dynamo.utils import counters

    return int(counters["inductor"]["fxgraph_cache_miss"])


class StepCompile:
    """The step's compiled pieces, compiled on the warm-up's first step, with progress: the
    start says it is compiling and how many pieces, each piece when its first call is
    through, the end how long it took (or that the cache had it all)."""

    def __init__(self, device: torch.device, notify: Notify | None = None) -> None:
        self.device = device
        self._notify = notify or (lambda _message: None)
        self.pieces: list[CompiledPiece] = []
        self._started: float | None = None
        self._misses = 0
        self._through = 0
        self.compile_s: float | None = None  # the first step's time, the compiles included
        self.from_cache: bool | None = None  # nothing had to be compiled

    def piece(self, fn: Callable[..., Any], label: str, part: str) -> CompiledPiece:
        made = CompiledPiece(fn, label, part, self)
        self.pieces.append(made)
        return made

    def settle(self) -> None:
        """A whole step ran: every graph is compiled, none will be again."""
        if self._started is None or self.compile_s is not None:
            return
        for piece in self.pieces:
            piece.settle()
        self.compile_s = time.perf_counter() - self._started
        self.from_cache = _cache_misses() == self._misses
        compiled = [p for p in self.pieces if p.compiled]
        if not compiled:
            return
        how = "read from the compile cache" if self.from_cache else "compiled"
        self.say(f"The speech model's step is {how} ({len(compiled)} of {len(self.pieces)} "
                 f"pieces, {self.compile_s:.1f} s).")

    def starting(self) -> None:
        if self._started is not None:
            return
        cache = use_compile_cache()
        self._started = time.perf_counter()
        self._misses = _cache_misses()
        self.say(f"Compiling the speech model's step for {self.device} with torch.compile, "
                 f"{len(self.pieces)} pieces (minutes on a first start; later starts read "
                 f"{cache})…")

    def through(self, piece: CompiledPiece) -> None:
        assert self._started is not None
        self._through += 1
        self.say(f"Compiled the {piece.label} ({self._through}/{len(self.pieces)}, "
                 f"{time.perf_counter() - self._started:.0f} s)…")

    def say(self, message: str) -> None:
        log.info("%s", message)
        self._notify(message)


class CompiledPiece:
    """`fn` compiled by torch.compile, each of its graphs in one piece (fullgraph), until
    `settle()`: from then on it never compiles again. Uncompiled where it cannot be. `part`:
    the part of the step it is (`bench step` counts its kernels there)."""

    def __init__(self, fn: Callable[..., Any], label: str, part: str,
                 group: StepCompile) -> None:
        self.fn = fn
        self.label = label
        self.part = part
        self._group = group
        self._compiled: Callable[..., Any] | None = None
        self.settled = False  # compiled, and compiling no more
        self.failure: str | None = None  # why it runs uncompiled

    @property
    def compiled(self) -> bool:
        """Compiled and in use."""
        return self.settled and self.failure is None

    def __call__(self, *args: Any) -> Any:
        if self.failure is not None:
            return self.fn(*args)
        if self.settled:
            assert self._compiled is not None
            with torch.compiler.set_stance("eager_on_recompile"):
                return self._compiled(*args)
        return self._compiling(*args)

    def _compiling(self, *args: Any) -> Any:
        first = self._compiled is None
        if first:
            self._group.starting()
            options: InductorOptions = INDUCTOR_OPTIONS | (
                CPU_OPTIONS if self._group.device.type == "cpu" else {})
            self._compiled = torch.compile(self.fn, fullgraph=True, dynamic=False,
                                           options=options)
        assert self._compiled is not None
        try:
            out = self._compiled(*args)
        except Exception as exc:  # no compiler, no Triton, an operator inductor lacks
            self.failure = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:300]}"
            log.warning("the %s runs uncompiled: torch.compile failed (%s)", self.label,
                        self.failure)
            self._group.say(f"The {self.label} runs uncompiled: torch.compile failed "
                            f"({self.failure}).")
            return self.fn(*args)
        if first:
            self._group.through(self)
        return out

    def settle(self) -> None:
        """Every graph the piece needs has been compiled: no more compiling; a call whose
        guards fail runs uncompiled."""
        if self.failure is None and self._compiled is not None:
            self.settled = True

    @contextmanager
    def observed(self, wrap: Callable[[Callable[..., Any]], Callable[..., Any]]
                 ) -> Iterator[None]:
        """While open, the compiled callable runs as `wrap(compiled)` (a bench counting
        the kernels it launches). Settled pieces only."""
        compiled = self._compiled
        assert self.compiled and compiled is not None, "the piece is not compiled"
        self._compiled = wrap(compiled)
        try:
            yield
        finally:
            self._compiled = compiled
