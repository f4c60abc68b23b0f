"""4-bit weights with the product fused: torch's own int4 kernels, no new dependency.

A linear layer's weight [out, in] is cut along `in` into groups of `group_size` weights; each
group keeps a float scale and zero, and each weight a 4-bit code c in 0..15, which the
kernels read as (c - 8) * scale + zero. The product runs in ONE kernel that reads the codes
(half a byte a weight) and never writes a widened weight: `aten._weight_int4pack_mm` on CUDA
(Ampere and newer: compute capability 8.0; bfloat16 activations) and its CPU counterpart
`aten._weight_int4pack_mm_for_cpu` (float32, bfloat16 or float16), so the tiny checkpoints
test the same arithmetic on this CPU. Each device has its own packing of the codes
(`_convert_weight_to_int4pack[_for_cpu]`), so a layer is quantized and packed on the device
it runs on, and refuses to run on another.

Group size 128 (precision.INT4_GROUP_SIZE), chosen by measured agreement with float32 and by
memory (docs/measurements.md has the figures):
- tiny-cs, teacher-forced over 512 positions (text logits' relative error, greedy text
  agreement): groups of 32: 0.181, 0.695; 64: 0.207, 0.645; 128: 0.210, 0.662; 256: 0.212,
  0.654 (its layers are 64 to 176 wide, so 64 to 256 barely differ there);
- a 7B-wide layer [1024, 4096] of Gaussian weights, relative error of the product: 32: 7.7%,
  64: 9.0%, 128: 10.0%, 256: 10.8% (Student-t weights, heavier tails: 9.4, 11.8, 14.3, 17.4%);
- the 7B's linear weights at 32, 64, 128, 256: 4.68, 4.21, 3.98, 3.86 GiB, so the whole
  speech model at 7.61, 7.15, 6.91, 6.79 GiB (memory_plan): on an 8 GB card only 128 and 256
  leave a gigabyte for the display and the allocator. 128 is the smallest group that does.
Shapes the kernels cannot take are padded, exactly: `in` to a whole number of groups (the
input is padded with zeros, so the padded weights multiply zeros) and `out` to a multiple
of 16 (the extra outputs are cut off). The 7B needs neither; tiny-cs needs both.

The layer is a moshi `QLinear` to moshi's attention (the only quantized linear it knows), which
would give the KV ring float16: `keep_kv_dtype` (app/moshi_internals.py) keeps the ring in the
activations' dtype instead (quantize.py does it for every attention it quantizes).
"""

from __future__ import annotations

import torch
from moshi.utils.quantize import QLinear

from app.engine.precision import INT4_GROUP_SIZE

INT4_GROUP_SIZES = (32, 64, 128, 256)  # what both kernels take
CODE_MIDDLE = 8  # the kernels subtract it: a code c stands for (c - 8) * scale + zero
OUT_MULTIPLE = 16  # the CPU packing wants `out` a multiple of 16 (CUDA's: of 8)
INT4_CAPABILITY = (8, 0)  # Ampere and newer


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def quantize_int4(weight: torch.Tensor, group_size: int
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Asymmetric 4-bit codes of `weight` [out, in] (in a multiple of `group_size`):
    (codes uint8 [out, in] in 0..15, scales [out, in / group], zeros [out, in / group]),
    float32, such that weight ~ (codes - 8) * scale + zero within each group."""
    out_features, in_features = weight.shape
    if in_features % group_size:
        raise ValueError(f"{in_features} inputs are not whole groups of {group_size}")
    groups = weight.float().reshape(out_features, in_features // group_size, group_size)
    low, high = groups.amin(dim=-1), groups.amax(dim=-1)  # [out, groups]
    scales = ((high - low) / 15).clamp(min=1e-8)
    codes = ((groups - low[..., None]) / scales[..., None]).round().clamp(0, 15)
    zeros = low + CODE_MIDDLE * scales
    return codes.to(torch.uint8).reshape(out_features, in_features), scales, zeros


def dequantize_int4(codes: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor
                    ) -> torch.Tensor:
    """The float32 weight [out, in] the codes stand for (what the kernels multiply by)."""
    out_features, in_features = codes.shape
    group_size = in_features // scales.shape[1]
    groups = codes.float().reshape(out_features, -1, group_size) - CODE_MIDDLE
    return (groups * scales[..., None] + zeros[..., None]).reshape(out_features, in_features)


def _inner_k_tiles(in_features: int) -> int:
    """The CUDA packing's tiles along `in` (in must be a multiple of 16 * tiles)."""
    return next(t for t in (8, 4, 2) if in_features % (16 * t) == 0)


def pack_int4(codes: torch.Tensor) -> torch.Tensor:
    """Codes [out, in] uint8, on the device that will run them, in that device's kernel
    layout."""
    tiles = _inner_k_tiles(codes.shape[1])
    if codes.device.type == "cuda":
        # CUDA's packer takes two codes a byte, the even column in the high nibble.
        paired = (codes[:, ::2] << 4) | codes[:, 1::2]
        return torch.ops.aten._convert_weight_to_int4pack(paired.contiguous(), tiles)
    if codes.device.type == "cpu":
        return torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes.to(torch.int32), tiles)
    raise ValueError(f"int4 weights run on CUDA and on the CPU, not on {codes.device.type}")


class Int4Linear(QLinear):
    """A linear layer (no bias) with 4-bit group-quantized weights, packed for the device of
    the layer it replaces; computes in that layer's dtype (bfloat16 on CUDA, the kernel's)."""

    weight: torch.nn.Parameter  # the codes in the device's packing
    scales_and_zeros: torch.nn.Parameter  # [in / group, out, 2]

    def __init__(self, linear: torch.nn.Linear, group_size: int = INT4_GROUP_SIZE) -> None:
        torch.nn.Module.__init__(self)  # not QLinear's: it would quantize with bitsandbytes
        if group_size not in INT4_GROUP_SIZES:
            raise ValueError(f"int4 groups are of {', '.join(map(str, INT4_GROUP_SIZES))} "
                             f"weights, not {group_size}")
        weight = linear.weight.detach()
        device = weight.device
        self.out_features, self.in_features = weight.shape
        self.group_size = group_size
        self.device_type = device.type
        # The CUDA kernel takes bfloat16 only; the CPU's takes the model's own dtype.
        self.compute_dtype = torch.bfloat16 if device.type == "cuda" else weight.dtype
        padded_in = _round_up(self.in_features, group_size)
        padded_out = _round_up(self.out_features, OUT_MULTIPLE)
        padded = torch.zeros(padded_out, padded_in, dtype=torch.float32, device=device)
        padded[: self.out_features, : self.in_features] = weight
        codes, scales, zeros = quantize_int4(padded, group_size)
        self.weight = torch.nn.Parameter(pack_int4(codes), requires_grad=False)
        # [in / group, out, 2]: the kernels' layout of each group's scale and zero.
        scales_and_zeros = torch.stack([scales.t(), zeros.t()], dim=-1)
        self.scales_and_zeros = torch.nn.Parameter(
            scales_and_zeros.to(self.compute_dtype).contiguous(), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.device.type != self.device_type:
            raise RuntimeError(f"these int4 weights were packed for {self.device_type}, not "
                               f"{x.device.type}: quantize on the device that runs them")
        shape = x.shape
        flat = x.reshape(-1, self.in_features).to(self.compute_dtype)  # [m, in]
        padding = self.scales_and_zeros.shape[0] * self.group_size - self.in_features
        if padding:
            flat = torch.nn.functional.pad(flat, (0, padding))
        if self.device_type == "cuda":
            out = torch.ops.aten._weight_int4pack_mm(flat.contiguous(), self.weight,
                                                     self.group_size, self.scales_and_zeros)
        else:
            out = torch.ops.aten._weight_int4pack_mm_for_cpu(
                flat.contiguous(), self.weight, self.group_size, self.scales_and_zeros)
        if out.shape[-1] != self.out_features:
            out = out[:, : self.out_features]
        return out.reshape(*shape[:-1], self.out_features).to(x.dtype)


def int4_unavailable_reason(device: torch.device) -> str | None:
    """None where the int4 kernels run on `device` and give what the dequantized weights
    give (a small layer is quantized, run and checked there); else why not, for the user."""
    if device.type == "cuda":
        capability = torch.cuda.get_device_capability(device)
        if capability < INT4_CAPABILITY:
            return (f"{torch.cuda.get_device_name(device)} has compute capability "
                    f"{capability[0]}.{capability[1]}: int4 weights need 8.0 or newer "
                    "(Ampere and later); choose int8")
    elif device.type != "cpu":
        return (f"int4 weights run on CUDA GPUs and on the CPU, not {device.type}; on a Mac "
                "the MLX engine's q4 is the 4-bit precision (device mlx)")
    try:
        generator = torch.Generator().manual_seed(0)
        dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
        linear = torch.nn.Linear(256, 48, bias=False)
        with torch.no_grad():
            linear.weight.copy_(torch.randn(48, 256, generator=generator))
            layer = Int4Linear(linear.to(device=device, dtype=dtype), group_size=64)
            x = torch.randn(3, 256, generator=generator).to(device=device, dtype=dtype)
            got = layer(x).float().cpu()
            codes, scales, zeros = quantize_int4(linear.weight.to(dtype).float(), 64)
            expected = x.float().cpu() @ dequantize_int4(codes, scales, zeros).t()
        error = float((got - expected).abs().max() / expected.abs().max())
    except Exception as exc:  # the library's own words go to the log, not to the user
        import logging

        logging.getLogger(__name__).info("int4 does not run on %s: %s: %s", device,
                                         type(exc).__name__, exc)
        return f"int4 weights need torch's int4 kernels, which do not run on {device.type} here"
    if not error < 0.02:
        return (f"torch's int4 kernel on {device.type} does not give the dequantized product "
                f"(relative difference {error:.3f}); choose int8 or bf16")
    return None
