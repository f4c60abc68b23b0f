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


def _cache_hits() -> int:
    from torch._dynamo.utils import counters

    return int(counters["inductor"]["fxgraph_cache_hit"])


class CompiledPiece:
    """`fn` compiled by torch.compile, each of its graphs in one piece (fullgraph), until
    `settle()`: from then on it never compiles again. Uncompiled where it cannot be."""

    def __init__(self, fn: Callable[..., Any], label: str, device: torch.device,
                 notify: Notify | None = None) -> None:
        self.fn = fn
        self.label = label
        self.device = device
        self._notify = notify or (lambda _message: None)
        self._compiled: Callable[..., Any] | None = None
        self._started = 0.0
        self._hits = 0
        self.settled = False  # compiled, and compiling no more
        self.failure: str | None = None  # why it runs uncompiled
        self.compile_s: float | None = None  # from the first call to settle(), compiles included
        self.from_cache: bool | None = None  # inductor's graphs were read from its cache

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
        if self._compiled is None:
            cache = use_compile_cache()
            self._say(f"Compiling the {self.label} for {self.device} with torch.compile (a "
                      f"first start takes a minute or more; later starts read it from "
                      f"{cache})…")
            self._hits = _cache_hits()
            self._started = time.perf_counter()
            options: InductorOptions = INDUCTOR_OPTIONS | (
                CPU_OPTIONS if self.device.type == "cpu" else {})
            self._compiled = torch.compile(self.fn, fullgraph=True, dynamic=False,
                                           options=options)
        try:
            return self._compiled(*args)
        except Exception as exc:  # no compiler, no Triton, an operator inductor lacks
            self.failure = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:300]}"
            log.warning("the %s runs uncompiled: torch.compile failed (%s)", self.label,
                        self.failure)
            self._notify(f"The {self.label} runs uncompiled: torch.compile failed "
                         f"({self.failure}).")
            return self.fn(*args)

    def settle(self) -> None:
        """Every graph the piece needs has been compiled (a whole step ran): no more
        compiling; a call whose guards fail runs uncompiled."""
        if self.settled or self.failure is not None or self._compiled is None:
            return
        self.settled = True
        self.compile_s = time.perf_counter() - self._started
        self.from_cache = _cache_hits() > self._hits
        how = "read from the compile cache" if self.from_cache else "compiled"
        self._say(f"The {self.label} is {how} ({self.compile_s:.1f} s).")

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

    def _say(self, message: str) -> None:
        log.info("%s", message)
        self._notify(message)
