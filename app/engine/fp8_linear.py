"""fp8 products: float8 e4m3 weights read once by `torch._scaled_mm`, never widened.

The weight [out, in] is kept as float8 e4m3 with one float32 scale per output row (its
largest magnitude over 448, e4m3's largest value). Each product quantizes the activations
too, one scale per input row, so the matmul itself runs in fp8 on the GPU's fp8 tensor cores
and reads one byte a weight:

    x [m, in] -> amax per row -> x / scale_x as e4m3 -> _scaled_mm(x8, w8.T) -> [m, out]

Two ways to apply the scales, chosen once per device by trying them (`fp8_mode`):
- "rowwise": `_scaled_mm` takes the row scales itself (per-row x, per-column w) and writes
  bfloat16: 4 kernels a layer (amax, the scale, the cast, the product). CUDA with fp8
  (Ada, Hopper, Blackwell) in the torch builds that have the row-wise kernels.
- "tensorwise": `_scaled_mm` with unit scales into float32, then the same two scales
  multiplied in: the same arithmetic in two more kernels. What this torch's CPU
  `_scaled_mm` takes (it scales per tensor only), so the CPU tests the maths of the GPU path;
  the GPU falls back to it where its torch lacks the row-wise kernels.
Per-row activation scales keep batched conversations independent: one row's loud frame
never coarsens another row's quantization.

Where the GPU has no fp8 (compute capability below 8.9) fp8 is refused with the reason
(fp8_unavailable_reason); the CPU runs it only for tests and `bench --allow-cpu`.
The layer is a moshi `QLinear` to moshi's attention, as int4_linear.Int4Linear is.
"""

from __future__ import annotations

import logging

import torch
from moshi.utils.quantize import QLinear

log = logging.getLogger(__name__)

FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0  # the largest float8 e4m3 value
FP8_CAPABILITY = (8, 9)  # Ada; Hopper is 9.0, Blackwell 10.0 and 12.0
FP8_MODES = ("rowwise", "tensorwise")
SHAPE_MULTIPLE = 16  # cuBLASLt's fp8 products want `in` and `out` multiples of 16
SCALE_FLOOR = 1e-12  # an all-zero row still divides by something


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def quantize_fp8_rows(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(e4m3 weight [out, in], float32 scale [out]): weight ~ e4m3 * scale, row by row."""
    weight = weight.float()
    scale = weight.abs().amax(dim=1).clamp(min=SCALE_FLOOR) / FP8_MAX
    return (weight / scale[:, None]).to(FP8), scale


class Fp8Linear(QLinear):
    """A linear layer (no bias) whose product runs in fp8 through `torch._scaled_mm`."""

    weight: torch.nn.Parameter  # [out, in] e4m3
    weight_scale: torch.nn.Parameter  # [1, out] float32
    one: torch.Tensor
    floor: torch.Tensor

    def __init__(self, linear: torch.nn.Linear, mode: str = "rowwise") -> None:
        torch.nn.Module.__init__(self)  # not QLinear's: it would quantize with bitsandbytes
        if mode not in FP8_MODES:
            raise ValueError(f"fp8 mode {mode!r}: one of {', '.join(FP8_MODES)}")
        weight = linear.weight.detach()
        device = weight.device
        self.out_features, self.in_features = weight.shape
        self.mode = mode
        self.padded_in = _round_up(self.in_features, SHAPE_MULTIPLE)
        padded_out = _round_up(self.out_features, SHAPE_MULTIPLE)
        padded = torch.zeros(padded_out, self.padded_in, dtype=torch.float32, device=device)
        padded[: self.out_features, : self.in_features] = weight
        quantized, scale = quantize_fp8_rows(padded)
        self.weight = torch.nn.Parameter(quantized, requires_grad=False)  # [out, in] e4m3
        self.weight_scale = torch.nn.Parameter(scale[None, :], requires_grad=False)  # [1, out]
        self.register_buffer("one", torch.ones((), device=device), persistent=False)
        self.register_buffer("floor", torch.full((), SCALE_FLOOR, device=device),
                             persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        flat = x.reshape(-1, self.in_features)  # [m, in]
        if self.padded_in != self.in_features:
            flat = torch.nn.functional.pad(flat, (0, self.padded_in - self.in_features))
        amax = torch.linalg.vector_norm(flat, ord=float("inf"), dim=1, keepdim=True,
                                        dtype=torch.float32)  # [m, 1]
        x_scale = torch.add(self.floor, amax, alpha=1.0 / FP8_MAX)  # [m, 1]
        quantized = torch.div(flat, x_scale).to(FP8)  # within +-448 by construction
        if self.mode == "rowwise":
            out = torch._scaled_mm(quantized, self.weight.t(), scale_a=x_scale,
                                   scale_b=self.weight_scale, out_dtype=torch.bfloat16)
        else:
            out = torch._scaled_mm(quantized, self.weight.t(), scale_a=self.one,
                                   scale_b=self.one, out_dtype=torch.float32)
            out = out.mul_(x_scale).mul_(self.weight_scale)
        if out.shape[-1] != self.out_features:
            out = out[:, : self.out_features]
        return out.reshape(*shape[:-1], self.out_features).to(x.dtype)


def _probe(device: torch.device, mode: str) -> float:
    """Relative difference of an fp8 layer's product in `mode` on `device` from the same
    quantized numbers multiplied in float32 (raises where `_scaled_mm` refuses)."""
    generator = torch.Generator().manual_seed(0)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    linear = torch.nn.Linear(64, 48, bias=False)
    with torch.no_grad():
        linear.weight.copy_(torch.randn(48, 64, generator=generator))
        layer = Fp8Linear(linear.to(device=device, dtype=dtype), mode)
        x = torch.randn(3, 64, generator=generator).to(device=device, dtype=dtype)
        got = layer(x).float().cpu()
        expected = x.float().cpu() @ linear.weight.float().cpu().t()
    return float((got - expected).abs().max() / expected.abs().max())


def fp8_mode(device: torch.device) -> str | None:
    """The fastest way this torch runs fp8 products on `device` correctly, or None."""
    for mode in FP8_MODES:
        try:
            error = _probe(device, mode)
        except Exception as exc:  # the library's own words go to the log
            log.info("fp8 %s products do not run on %s: %s: %s", mode, device,
                     type(exc).__name__, exc)
            continue
        if error < 0.1:  # e4m3 keeps 3 mantissa bits: a few percent, not more
            return mode
        log.info("fp8 %s products on %s differ from float32 by %.3f", mode, device, error)
    return None


def fp8_unavailable_reason(device: torch.device) -> str | None:
    """None on an NVIDIA GPU with fp8 where this torch runs fp8 products; else why fp8
    weights are not offered."""
    wanted = f"{FP8_CAPABILITY[0]}.{FP8_CAPABILITY[1]}"
    if device.type != "cuda":
        return (f"fp8 weights are for NVIDIA GPUs with fp8 (compute capability {wanted} or "
                f"newer: Ada, Hopper, Blackwell), not {device.type}; choose int8 or bf16")
    capability = torch.cuda.get_device_capability(device)
    if capability < FP8_CAPABILITY:
        return (f"{torch.cuda.get_device_name(device)} has compute capability "
                f"{capability[0]}.{capability[1]}: fp8 needs {wanted} or newer; choose int8 "
                "or int4")
    if fp8_mode(device) is None:
        return (f"this torch ({torch.__version__}) does not run fp8 products on "
                f"{torch.cuda.get_device_name(device)}; choose int8 or int4")
    return None
