"""Which card keeps the 7B in real time, at which precision: predicted, with its basis.

Pure arithmetic (no torch, no Qt), like memory_plan.py beside it. A step of the 7B is
predicted as the time its reads take at the card's memory bandwidth, plus a floor per
operator, plus the host's share:

    step  = (weights + KV read) / (bandwidth * READ_EFFICIENCY)
            + operators * per-operator floor + host
    frame = step + Mimi (encode + decode: its reads at the bandwidth + the H200's measured rest)

What it stands on, each measured once:
- the bytes and operators of one step, by precision: `python main.py bench step --model 7b
  --precision bf16,int8,fp8,int4` on this project's build VM (the 7B's architecture at a small
  width, its bytes at full width: app/bench/step_bench.py), below as STEP_COUNTS;
- the one GPU measurement (notes/gpu-h200.md, bench gpu and app/bench/gpu_profile.py on an
  H200, bf16, CUDA graphs on): step 22.0 ms, of it 18.8 ms of kernels (about 9,500 a step,
  where the CPU counted 9,342 operators), full frame 27.8 ms, block(600) + step 58.0 ms.
  Kernel time less the reads at 4.8 TB/s leaves 15.1 ms for 9,342 operators: a floor of
  1.61 us an operator, which the prediction keeps for every NVIDIA card (small kernels take
  about as long on any of them); the 3.2 ms between the step and its kernels is the host's.
Everything else is a card's spec sheet (bandwidth, dense 16-bit tensor TFLOPS), read at
READ_EFFICIENCY of its peak. Nothing here was measured on the cards listed: each figure is
"predicted", and says so.

Spans: the frame's headroom (80 ms less the frame) is what a span block may take; a block
of n positions is predicted from the H200's block(600) (36 ms for 640 padded positions),
scaled by the card's 16-bit TFLOPS against the H200's 990, and by n.

Real time: the engine keeps a quarter of each frame free (EngineOptions.budget_margin), so
a precision "keeps up" when its predicted frame is at most 60 ms.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from app.plan.memory_plan import (
    GIB,
    PRECISIONS,
    STT_PRECISION,
    DeviceMemory,
    ModelShape,
    Recommendation,
    format_capacity,
    format_gb,
)

FRAME_MS = 80.0
BUDGET_MARGIN = 0.25  # the share of the frame the engine keeps free (speech_engine.py)
KEEPS_UP_MS = FRAME_MS * (1 - BUDGET_MARGIN)
READ_EFFICIENCY = 0.8  # reads reach about 80% of a card's peak bandwidth (assumed)

# The H200 run (notes/gpu-h200.md).
H200_BANDWIDTH_GBS = 4800.0
H200_TFLOPS = 990.0
H200_STEP_MS = 22.0
H200_KERNEL_MS = 18.8
H200_FRAME_MS = 27.8
H200_BLOCK_600_MS = 58.0 - 22.0  # block(600) + step less the step
BLOCK_PADDED = 640  # the 600-position block's padded forward (position_forwards.py)


@dataclass(frozen=True)
class StepCount:
    """One step of the 7B at a precision, counted (bench step): operators a step, bytes of
    weights and KV it reads (GB, 1e9), at full width."""

    operators: int
    weights_gb: float
    kv_gb: float


# `python main.py bench step --model 7b --precision bf16,int8,fp8,int4` (2026-12-04, this
# build VM, CPU, the 7B's architecture at width 256, bytes at full width; the step alone,
# without Mimi). A step runs 545 linear layers: bf16 one `mm` each; int4 one fused product
# each (9,470 counted at width 256, where 128 of them pad their input to whole groups; the
# 7B's inputs are whole groups); fp8 five on the GPU (the row amax, the scale, the division,
# the cast, `_scaled_mm`: 4 more than bf16's), the CPU's per-tensor way three more again
# (counted 13,157); int8 bitsandbytes' CPU path (its CUDA path may differ).
STEP_COUNTS: dict[str, StepCount] = {
    "bf16": StepCount(9342, 16.08, 1.89),
    "int8": StepCount(11029, 8.04, 1.89),
    "fp8": StepCount(9342 + 4 * 545, 8.04, 1.89),
    "int4": StepCount(9342, 4.27, 1.89),
}
MIMI_OPERATORS = 1370  # encode + decode of a frame, counted the same way
MIMI_GB = 0.333  # its float32 weights and rings read per frame
# The H200's frame less its step, less Mimi's reads: Mimi's launches and host time, which
# do not shrink on a faster card (Mimi runs eagerly, one launch per operator).
MIMI_REST_MS = H200_FRAME_MS - H200_STEP_MS - MIMI_GB / H200_BANDWIDTH_GBS * 1000.0
BASIS_OPERATORS = STEP_COUNTS["bf16"].operators
_H200_READS_MS = ((STEP_COUNTS["bf16"].weights_gb + STEP_COUNTS["bf16"].kv_gb)
                  / H200_BANDWIDTH_GBS * 1000.0)
OPERATOR_FLOOR_US = (H200_KERNEL_MS - _H200_READS_MS) / BASIS_OPERATORS * 1000.0
HOST_MS = H200_STEP_MS - H200_KERNEL_MS
# Apple silicon through MLX: no measurement; its operators assumed as many as torch's, each
# dispatched by Metal at about 4 us (assumed).
MLX_OPERATOR_FLOOR_US = 4.0
MLX_BITS = {"q8": 8.5, "q4": 4.5}  # a 16-bit scale and bias per 64 weights
# The linear weights a step reads (billions): what bf16's and int4's counts differ by, at
# 16 and 4.25 bits a weight; the rest (norms, embedding rows) is under a megabyte.
LINEAR_READ_B = (STEP_COUNTS["bf16"].weights_gb - STEP_COUNTS["int4"].weights_gb) / (2 - 4.25 / 8)


@dataclass(frozen=True)
class Card:
    name: str
    memory_gib: float
    bandwidth_gbs: float
    tflops: float  # dense 16-bit tensor TFLOPS, FP32 accumulate (spec sheet)
    precisions: tuple[str, ...]  # what the engine runs there, best quality first
    engine: str = "torch"  # or "mlx"
    aliases: tuple[str, ...] = ()

    @property
    def memory_bytes(self) -> int:
        return int(self.memory_gib * GIB)


_AMPERE = ("bf16", "int8", "int4")  # compute capability 8.0-8.7: no fp8
_ADA = ("bf16", "fp8", "int8", "int4")  # 8.9 and newer
_MLX = ("bf16", "q8", "q4")

CARDS: tuple[Card, ...] = (
    Card("RTX 3060 12 GB", 12, 360, 25, _AMPERE, aliases=("RTX 3060",)),
    Card("RTX 3070 8 GB", 8, 448, 41, _AMPERE, aliases=("RTX 3070",)),
    Card("RTX 4060 8 GB", 8, 272, 30, _ADA, aliases=("RTX 4060",)),
    Card("RTX 4060 Ti 16 GB", 16, 288, 44, _ADA, aliases=("RTX 4060 Ti",)),
    Card("RTX 4070 12 GB", 12, 504, 58, _ADA, aliases=("RTX 4070",)),
    Card("RTX 4080 16 GB", 16, 717, 97, _ADA, aliases=("RTX 4080",)),
    Card("RTX 4090 24 GB", 24, 1008, 165, _ADA, aliases=("RTX 4090",)),
    Card("A10 24 GB", 24, 600, 125, _AMPERE, aliases=("A10",)),
    Card("L4 24 GB", 24, 300, 121, _ADA, aliases=("L4",)),
    Card("Apple M2 16 GB (MLX)", 16, 100, 7, _MLX, "mlx", ("M2",)),
    Card("Apple M3 Pro 18 GB (MLX)", 18, 150, 10, _MLX, "mlx", ("M3 Pro",)),
    Card("Apple M4 Pro 24 GB (MLX)", 24, 273, 14, _MLX, "mlx", ("M4 Pro",)),
    Card("Apple M2 Max 32 GB (MLX)", 32, 400, 22, _MLX, "mlx", ("M2 Max",)),
    Card("H200 141 GB (measured: bf16 step 22.0 ms)", 141, H200_BANDWIDTH_GBS, H200_TFLOPS,
         ("bf16", "fp8", "int8", "int4"), aliases=("H200",)),
)


def find_card(name: str) -> Card | None:
    """The card whose name or alias `name` holds ("NVIDIA GeForce RTX 4060 Ti" is the
    4060 Ti, not the 4060): the longest alias found wins."""
    text = f" {name.lower().replace('-', ' ')} "
    best: tuple[int, Card] | None = None
    for card in CARDS:
        for alias in (card.name, *card.aliases):
            key = f" {alias.lower()} "
            if key in text and (best is None or len(key) > best[0]):
                best = (len(key), card)
    return best[1] if best else None


@dataclass(frozen=True)
class Prediction:
    card: Card
    precision: str
    step_ms: float
    frame_ms: float
    reads_ms: float  # of the step: its weights and KV at the bandwidth
    operators_ms: float  # of the step: the per-operator floor
    block_600_ms: float  # a 600-position span block's read

    @property
    def headroom_ms(self) -> float:
        """What a frame leaves for spans: 80 ms less the frame."""
        return FRAME_MS - self.frame_ms

    @property
    def keeps_up(self) -> bool:
        return self.frame_ms <= KEEPS_UP_MS

    def block_positions(self) -> int:
        """The longest span block the headroom reads within the frame (0: none)."""
        if self.headroom_ms <= 0:
            return 0
        return int(600 * self.headroom_ms / self.block_600_ms)

    def verdict(self) -> str:
        if self.keeps_up:
            return "keeps up"
        return "too slow" if self.frame_ms > FRAME_MS else "within 80 ms, not with the margin"

    def figures(self) -> str:
        spans = (f"{self.headroom_ms:.0f} ms of the frame left for spans (a block of about "
                 f"{self.block_positions()} positions; 600 take {self.block_600_ms:.0f} ms)"
                 if self.headroom_ms > 0 else "no time left for spans")
        return (f"step {self.step_ms:.0f} ms, frame {self.frame_ms:.0f} ms (predicted), "
                f"{spans}")

    def text(self) -> str:
        return f"{self.precision}: {self.verdict()}, {self.figures()}"


def _step_count(precision: str) -> StepCount:
    if precision in STEP_COUNTS:
        return STEP_COUNTS[precision]
    base = STEP_COUNTS["bf16"]  # MLX's q8, q4: torch's operators, their own bits a weight
    other = base.weights_gb - 2 * LINEAR_READ_B
    return StepCount(base.operators, LINEAR_READ_B * MLX_BITS[precision] / 8 + other,
                     base.kv_gb)


def predict(card: Card, precision: str) -> Prediction:
    count = _step_count(precision)
    bandwidth = card.bandwidth_gbs * READ_EFFICIENCY
    if card is CARDS[-1]:  # the H200 itself: its measurement's own terms, no derating
        bandwidth = card.bandwidth_gbs
    reads_ms = (count.weights_gb + count.kv_gb) / bandwidth * 1000.0
    floor_us = MLX_OPERATOR_FLOOR_US if card.engine == "mlx" else OPERATOR_FLOOR_US
    operators_ms = count.operators * floor_us / 1000.0
    step = reads_ms + operators_ms + HOST_MS
    mimi = MIMI_GB / bandwidth * 1000.0 + MIMI_REST_MS
    block = H200_BLOCK_600_MS * H200_TFLOPS / card.tflops
    return Prediction(card, precision, step, step + mimi, reads_ms, operators_ms, block)


def recommend(card: Card, fits: Sequence[str]) -> Recommendation:
    """The best-quality precision among `fits` (those the memory plan fits on the card)
    whose predicted frame keeps real time; else the fastest that fits, said to be short."""
    candidates = [p for p in card.precisions if p in fits]
    if not candidates:
        return Recommendation(None, f"nothing of the 7B fits {card.name}")
    predictions = [predict(card, p) for p in candidates]
    for prediction in predictions:
        if prediction.keeps_up:
            return Recommendation(
                prediction.precision,
                f"{prediction.precision} keeps the 7B in real time on {card.name}: "
                f"{prediction.figures()}; {basis_short(card)}")
    fastest = min(predictions, key=lambda p: p.frame_ms)
    return Recommendation(
        fastest.precision,
        f"no precision that fits keeps the 7B in real time on {card.name}; the fastest, "
        f"{fastest.precision}: {fastest.verdict()}, {fastest.figures()}; {basis_short(card)}")


def basis_short(card: Card) -> str:
    """What a card's prediction stands on, in a few words."""
    if card.engine == "mlx":
        return (f"predicted from its bandwidth and an assumed {MLX_OPERATOR_FLOOR_US:.0f} us "
                "an operator (no Mac measured yet)")
    return "predicted from its bandwidth and a per-operator floor measured on an H200"

BASIS_LINES = (
    "Predicted, not measured on these cards. Basis: a step reads the 7B's weights and KV "
    f"(counted: bench step) at {READ_EFFICIENCY:.0%} of the card's bandwidth, plus "
    f"{OPERATOR_FLOOR_US:.2f} us for each of its about {BASIS_OPERATORS:,} operators (the "
    f"H200's 18.8 ms of kernels less its reads, over them), plus {HOST_MS:.1f} ms of host "
    f"time; a frame adds Mimi ({MIMI_OPERATORS:,} operators: {MIMI_REST_MS:.1f} ms on the "
    "H200 plus its reads). Apple silicon: MLX's operators assumed as many as torch's, "
    f"{MLX_OPERATOR_FLOOR_US:.0f} us each (assumed). A span block: the H200's block(600) "
    "scaled by the card's 16-bit TFLOPS.",
)


# ---- the card table and the 8 GB question ---------------------------------------------------


def _device_of(card: Card) -> DeviceMemory:
    kind = "mac" if card.engine == "mlx" else "cuda"
    return DeviceMemory(kind, card.name, card.memory_bytes, card.memory_bytes,
                        precisions=card.precisions)


def fit_text(card: Card, speech: ModelShape, stt: ModelShape | None, precision: str) -> str:
    """Whether the speech model at `precision` fits the card with the recogniser, alone, or
    not at all (the memory plan's arithmetic, the card all free)."""
    device = _device_of(card)
    ceiling = device.ceiling_bytes()
    alone = speech.bytes_at(PRECISIONS[precision])
    stt_bytes = stt.bytes_at(PRECISIONS[STT_PRECISION[device.kind]]) if stt else 0
    whole = alone + stt_bytes
    of = f"of {format_capacity(ceiling)} GB"
    if stt is not None and whole <= ceiling:
        return f"fits with speech recognition ({format_gb(whole)} {of})"
    if alone <= ceiling:
        if stt is None:
            return f"fits ({format_gb(alone)} {of})"
        return f"fits alone ({format_gb(alone)} {of}; with speech recognition {format_gb(whole)})"
    return f"does not fit ({format_gb(alone)} {of})"


def card_table(speech: ModelShape, stt: ModelShape | None) -> list[str]:
    """Every card of CARDS at each precision it runs: predicted step and frame, whether it
    keeps up, the headroom for spans, and whether it fits; then the basis."""
    lines = [f"{speech.name} on common cards: predicted step and frame (ms; keeps up: frame "
             f"at most {KEEPS_UP_MS:.0f} ms, the engine keeping a quarter of the 80 ms free)"]
    for card in CARDS:
        lines.append(f"{card.name}: {card.bandwidth_gbs:.0f} GB/s, {card.tflops:.0f} TFLOPS")
        for precision in card.precisions:
            prediction = predict(card, precision)
            lines.append(f"  {prediction.text()}; {fit_text(card, speech, stt, precision)}")
    return lines + list(BASIS_LINES)


# The recogniser on a CPU instead of an 8 GB card (the app runs it on the speech model's
# device today): its float32 weights read every frame at the RAM's bandwidth, plus its
# operators at a CPU's dispatch cost (both assumed: about 2,200 operators, 16 layers as the
# 7B's 83 a layer with its 32 embeddings and Mimi's encode, 10 us each).
CPU_RECOGNISER_OPERATORS = 2200
CPU_OPERATOR_US = 10.0
RAM_BANDWIDTHS_GBS = (("dual-channel DDR4-3200", 51.2), ("dual-channel DDR5-5600", 89.6))


def cpu_recogniser_lines(stt: ModelShape) -> list[str]:
    weights_gb = (stt.linear_params + stt.other_params) * 4 / 1e9
    lines = []
    for ram, gbs in RAM_BANDWIDTHS_GBS:
        frame = (weights_gb / (gbs * READ_EFFICIENCY) * 1000.0
                 + CPU_RECOGNISER_OPERATORS * CPU_OPERATOR_US / 1000.0)
        verdict = "keeps up" if frame <= KEEPS_UP_MS else (
            "too slow" if frame > FRAME_MS else "within 80 ms, without margin")
        lines.append(f"the recogniser on the CPU with {ram} ({gbs:.0f} GB/s): {frame:.0f} ms a "
                     f"frame (predicted: {weights_gb:.1f} GB of float32 weights a frame), "
                     f"{verdict}")
    return lines


def eight_gb_lines(speech: ModelShape, stt: ModelShape | None) -> list[str]:
    """The 8 GB question: the 7B at int4 with Mimi, its KV ring and the recogniser."""
    lines = ["8 GB cards, the 7B at int4 (with Mimi and its KV ring):"]
    for card in (c for c in CARDS if c.memory_gib <= 8):
        prediction = predict(card, "int4")
        lines.append(f"  {card.name}: {fit_text(card, speech, stt, 'int4')}; "
                     f"{prediction.text()}")
    if stt is not None:
        lines.append("  speech recognition does not fit beside it on the card; the app runs it "
                     "on the speech model's device, so on an 8 GB card it is off (or on a "
                     "server); on the CPU instead (not a setting yet):")
        lines += [f"  {line}" for line in cpu_recogniser_lines(stt)]
    return lines
