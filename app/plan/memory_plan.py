"""What fits in memory before anything loads: the speech model at each precision, the speech
recogniser and the user's Ollama model, against what the device has free.

Pure arithmetic on facts gathered elsewhere (app/plan/memory_survey.py gathers them: the
checkpoint's shape from its architecture, Ollama's own report of its model, the device's free
memory), so that tests plan for made-up machines. No torch, no Qt.

Sizes are in binary units written "GB", as GPUs and RAM are sold: a "16 GB" card or Mac holds
16 GiB. The plan's sentence reads like
"Context Spanning 7B in 8-bit, 10.2 GB + speech recognition 2.3 GB + qwen3:4b in Ollama
3.2 GB = 15.7 of 16 GB".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from app.engine.precision import DEVICE_PRECISIONS, INT4_GROUP_SIZE

GIB = 1024**3

DeviceKind = str  # "cuda", "mac" (Apple unified memory) or "cpu"


@dataclass(frozen=True)
class Precision:
    """How many bits a weight takes. Only the linear layers' weights are quantized (what
    torch's int8 weight-only and MLX's QuantizedLinear replace); embeddings and norms stay
    16-bit, and so do the activations and the KV cache."""

    name: str
    label: str  # as the sentence says it
    linear_bits: float
    other_bits: int
    cache_bits: int


PRECISIONS: dict[str, Precision] = {
    p.name: p
    for p in (
        Precision("fp32", "32-bit", 32, 32, 32),
        Precision("bf16", "bf16", 16, 16, 16),
        Precision("fp16", "fp16", 16, 16, 16),
        Precision("int8", "8-bit", 8, 16, 16),  # torch int8 weight-only: one scale per row
        Precision("fp8", "fp8", 8, 16, 16),  # float8 e4m3 weights, one scale per row
        # torch int4: a bf16 scale and zero per group of INT4_GROUP_SIZE weights
        Precision("int4", "4-bit", 4 + 32 / INT4_GROUP_SIZE, 16, 16),
        Precision("q8", "8-bit", 8.5, 16, 16),  # MLX: 16-bit scale and bias per 64 weights
        Precision("q4", "4-bit", 4.5, 16, 16),
    )
}

# The recogniser is never quantized: its manifest's bf16, float32 on a CPU.
STT_PRECISION: dict[DeviceKind, str] = {"cuda": "bf16", "mac": "bf16", "cpu": "fp32"}


def mac_gpu_share(total_bytes: int) -> float:
    """The part of a Mac's unified memory that Metal lets the GPU keep (its default
    `recommendedMaxWorkingSetSize`: about two thirds up to 36 GB, three quarters above);
    the rest stays with macOS and the apps."""
    return 2 / 3 if total_bytes <= 36 * GIB else 3 / 4


@dataclass(frozen=True)
class DeviceMemory:
    """The device the models would load on. Injected, so that tests use made-up machines."""

    kind: DeviceKind
    name: str
    total_bytes: int
    free_bytes: int
    # Mac: the GPU's working-set limit when the system reports it (torch.mps); None: the
    # share rule above.
    gpu_limit_bytes: int | None = None
    precisions: tuple[str, ...] = ()  # what runs here; empty: DEVICE_PRECISIONS[kind]
    # What "auto" picks from, best first (a CPU runs int8 but loads float32 by default);
    # empty: all of `offered()`.
    auto_precisions: tuple[str, ...] = ()

    def offered(self) -> tuple[str, ...]:
        return self.precisions or DEVICE_PRECISIONS[self.kind]

    def auto_candidates(self) -> tuple[str, ...]:
        return self.auto_precisions or self.offered()

    def ceiling_bytes(self) -> int:
        """The most the models may take together, however free the device is."""
        if self.kind != "mac":
            return self.total_bytes
        if self.gpu_limit_bytes is not None:
            return min(self.total_bytes, self.gpu_limit_bytes)
        return int(self.total_bytes * mac_gpu_share(self.total_bytes))

    def usable_bytes(self, held_by_plan: int = 0) -> int:
        """Memory for the plan: what is free now, plus what the plan's own parts already hold
        (a loaded Ollama model is counted in the plan, so it is not "used by others")."""
        return min(self.ceiling_bytes(), self.free_bytes + held_by_plan)

    def describe(self) -> str:
        total = format_capacity(self.total_bytes)
        if self.kind == "mac":
            return (f"{self.name}: {total} GB of unified memory, "
                    f"{format_capacity(self.ceiling_bytes())} GB of it for the GPU (macOS keeps "
                    "the rest)")
        where = "memory" if self.kind == "cpu" else "GPU memory"
        return f"{self.name}: {total} GB of {where}, {format_capacity(self.free_bytes)} GB free"


@dataclass(frozen=True)
class ModelShape:
    """A checkpoint's sizes, counted from its architecture without loading its weights
    (app/plan/footprint.py)."""

    name: str  # as the sentence says it: "Context Spanning 7B"
    linear_params: int  # weights of linear layers: what 8 and 4 bits quantize
    other_params: int  # embeddings, norms, biases
    codec_params: int  # its Mimi, run in float32
    cache_values: int  # numbers its KV caches hold at batch 1 (rings widened for blocks)
    codec_cache_values: int  # Mimi's own streaming caches, float32
    workspace_bytes: int  # allowance for activations and allocator slack, not a measurement

    def bytes_at(self, precision: Precision) -> int:
        weights = self.linear_params * precision.linear_bits / 8
        weights += self.other_params * precision.other_bits / 8
        cache = self.cache_values * precision.cache_bits / 8
        codec = (self.codec_params + self.codec_cache_values) * 4
        return int(weights + cache + codec + self.workspace_bytes)


@dataclass(frozen=True)
class LlmLoad:
    """The user's LLM as its server reports it."""

    model: str
    bytes: int  # what it takes on this device
    measured: bool  # True: the server reports it loaded (Ollama /api/ps); False: estimated
    held_now: bool  # it is in this device's memory now, so the free figure already lacks it
    server: str = "Ollama"


@dataclass(frozen=True)
class PlanPart:
    label: str
    bytes: int
    estimated: bool = False

    def text(self) -> str:
        about = "about " if self.estimated else ""
        return f"{self.label} {about}{format_gb(self.bytes)} GB"


@dataclass(frozen=True)
class MemoryPlan:
    """One arrangement: the parts that would load on this device, against its memory."""

    parts: tuple[PlanPart, ...]
    usable_bytes: int
    precision: str | None  # the speech model's; None: it does not run on this device

    @property
    def total_bytes(self) -> int:
        return sum(p.bytes for p in self.parts)

    @property
    def fits(self) -> bool:
        return self.total_bytes <= self.usable_bytes

    def sentence(self) -> str:
        if not self.parts:
            return f"nothing loads here = 0 of {format_capacity(self.usable_bytes)} GB"
        used = " + ".join(p.text() for p in self.parts)
        return (f"{used} = {format_gb(self.total_bytes)} of "
                f"{format_capacity(self.usable_bytes)} GB")


@dataclass(frozen=True)
class Suggestion:
    """One change that makes the plan fit, and the plan it gives."""

    change: str
    plan: MemoryPlan


@dataclass(frozen=True)
class Recommendation:
    """The precision that keeps real time on this device, not only fits, and why (made by
    app/plan/speed_plan.py from predictions; None: nothing it runs keeps up and fits)."""

    precision: str | None
    why: str


@dataclass(frozen=True)
class MemoryReport:
    device: DeviceMemory
    plan: MemoryPlan  # the best that fits; when nothing does, the smallest tried
    suggestions: tuple[Suggestion, ...]  # only when the plan does not fit
    notes: tuple[str, ...] = ()
    recommendation: Recommendation | None = None  # a known card and the 7B only

    @property
    def fits(self) -> bool:
        return self.plan.fits

    @property
    def precision(self) -> str | None:
        return self.plan.precision

    def lines(self) -> list[str]:
        lines = [self.device.describe()]
        if self.fits:
            lines.append(f"Fits: {self.plan.sentence()}")
        else:
            lines.append(f"Does not fit: {self.plan.sentence()}")
            if self.suggestions:
                lines.append("It fits with one of these changes:")
                lines += [f"- {s.change}: {s.plan.sentence()}" for s in self.suggestions]
            else:
                lines.append("Nothing of this fits on this device, even with the speech engine "
                             "on a server and the LLM on another machine.")
        if self.recommendation is not None:
            lines.append(f"Real time: {self.recommendation.why}.")
        return lines + list(self.notes)


def format_gb(n_bytes: float) -> str:
    return f"{n_bytes / GIB:.1f}"


def format_capacity(n_bytes: float) -> str:
    """A device's size as it is sold ("16"), or to a tenth when it is not whole."""
    value = n_bytes / GIB
    return f"{value:.0f}" if abs(value - round(value)) < 0.05 else f"{value:.1f}"


def _speech_part(speech: ModelShape, precision: Precision) -> PlanPart:
    return PlanPart(f"{speech.name} in {precision.label},", speech.bytes_at(precision))


def _plan(device: DeviceMemory, speech: ModelShape | None, precision: str | None,
          stt: ModelShape | None, llm: LlmLoad | None) -> MemoryPlan:
    parts: list[PlanPart] = []
    if speech is not None and precision is not None:
        parts.append(_speech_part(speech, PRECISIONS[precision]))
    if stt is not None:
        stt_bytes = stt.bytes_at(PRECISIONS[STT_PRECISION[device.kind]])
        parts.append(PlanPart("speech recognition", stt_bytes))
    held = 0
    if llm is not None:
        parts.append(PlanPart(f"{llm.model} in {llm.server}", llm.bytes, not llm.measured))
        held = llm.bytes if llm.held_now else 0
    return MemoryPlan(tuple(parts), device.usable_bytes(held),
                      precision if speech is not None else None)


def _best(device: DeviceMemory, speech: ModelShape | None, candidates: Sequence[str],
          stt: ModelShape | None, llm: LlmLoad | None) -> MemoryPlan:
    """The first candidate precision that fits; else the last (smallest) one."""
    plans = [_plan(device, speech, name, stt, llm) for name in candidates] or [
        _plan(device, speech, None, stt, llm)]
    return next((p for p in plans if p.fits), plans[-1])


def plan_memory(
    device: DeviceMemory,
    speech: ModelShape | None,
    stt: ModelShape | None = None,
    llm: LlmLoad | None = None,
    precision: str | None = None,
    notes: Sequence[str] = (),
) -> MemoryReport:
    """The best precision that fits (or the one asked for), and when nothing fits, what to
    change: a smaller precision, the LLM on another machine, the speech engine on a server.

    `speech` None: the speech engine already runs on a server; `llm` None: the LLM is not on
    this device (or is not counted, and `notes` say why).
    """
    offered = device.offered()
    if precision is not None and precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r} (known: {', '.join(PRECISIONS)})")
    candidates = (precision,) if precision else device.auto_candidates()
    plan = _best(device, speech, candidates, stt, llm)
    suggestions: list[Suggestion] = []
    if not plan.fits:
        if precision is not None and speech is not None:
            smaller = [p for p in offered if p != precision
                       and speech.bytes_at(PRECISIONS[p]) < speech.bytes_at(PRECISIONS[precision])]
            other = _best(device, speech, smaller, stt, llm) if smaller else None
            if other is not None and other.fits:
                label = PRECISIONS[other.precision or ""].label
                suggestions.append(Suggestion(
                    f"load the speech model in {label} (Settings → Speech model → precision)",
                    other))
        if llm is not None:
            elsewhere = _best(device, speech, candidates, stt, None)
            if elsewhere.fits:
                suggestions.append(Suggestion(
                    f"run {llm.model} on another machine (Settings → Assistant (LLM) → "
                    "Server)", elsewhere))
        if stt is not None:
            # Speech recognition is what lets the LLM hear the user; without it the LLM
            # answers typed questions only (and the model's own `<ret>` asks without words).
            unheard = _best(device, speech, candidates, None, llm)
            if unheard.fits:
                suggestions.append(Suggestion(
                    "turn speech recognition off (Settings → Assistant (LLM) → Speech "
                    "recognition: None; the LLM then reads only what you type)", unheard))
            elif llm is not None:
                alone = _best(device, speech, candidates, None, None)
                if alone.fits:
                    suggestions.append(Suggestion(
                        f"run {llm.model} on another machine and turn speech recognition off "
                        "(the LLM then reads only what you type)", alone))
        if speech is not None:
            served = _plan(device, None, None, stt, llm)
            if served.fits:
                suggestions.append(Suggestion(
                    "run the speech engine on a server (`python main.py serve` on a machine "
                    "with a larger GPU; Settings → Speech model → Runs on: Server)", served))
    return MemoryReport(device, plan, tuple(suggestions), tuple(notes))
