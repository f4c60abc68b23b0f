"""The speech model's precision: one setting (Settings → Speech model → precision, `--precision`
on `run`, `serve` and `bench`), and what each device offers.

- torch (cuda, mps, cpu): fp32, bf16; int8 (moshi's bitsandbytes QLinear: int8 weights, one
  scale per row, float16 compute) where bitsandbytes' kernels run (CUDA, and this CPU);
  fp8 (float8 e4m3 weights and activations, the product in `torch._scaled_mm`) on NVIDIA
  GPUs that have fp8 (compute capability 8.9 and newer: Ada, Hopper, Blackwell); int4
  (4-bit weights in groups of 128, the product in torch's int4 kernel) on CUDA GPUs from
  Ampere (8.0) on and on the CPU.
- MLX (`mlx`): fp32, bf16, q8, q4 (app/engine/mlx/checkpoint.py).
"auto" is the best precision that fits by the memory plan (app/plan/memory_plan.py).
What runs on this machine's devices is asked of the devices themselves
(app/engine/device.survey_devices); what a loaded checkpoint runs at is
torch_precision.loaded_precision.

No torch at import: the settings dialog and the CLI's parsers import it.
"""

from __future__ import annotations

AUTO = "auto"
TORCH_PRECISIONS = ("fp32", "bf16", "int8", "fp8", "int4")
MLX_PRECISIONS = ("fp32", "bf16", "q8", "q4")
MLX_CPU_PRECISIONS = ("fp32", "q8", "q4")  # MLX on a CPU computes float32 under 8 and 4 bits
PRECISION_CHOICES = (AUTO, "fp32", "bf16", "int8", "fp8", "int4", "q8", "q4")  # the setting's
FLOAT_DTYPES = {"fp32": "float32", "bf16": "bfloat16"}  # the torch dtype names
# int4's weights per group (one bf16 scale and zero each: 4.25 bits a weight). Chosen by
# measured agreement and by what an 8 GB card holds (app/engine/int4_linear.py says how).
INT4_GROUP_SIZE = 128

# What each kind of device ("cuda", "mac": Apple unified memory, "cpu") offers, best first:
# "auto" takes the first that fits by the memory plan. CUDA runs the torch engine (bf16,
# 8-bit weights); a Mac runs MLX (bf16, 8 and 4 bits); the CPU loads in float32
# (app/checkpoints/loader.runtime_dtype: bf16 matmuls there are slow).
DEVICE_PRECISIONS: dict[str, tuple[str, ...]] = {
    "cuda": ("bf16", "int8"),
    "mac": ("bf16", "q8", "q4"),
    "cpu": ("fp32",),
}

# How the settings dialog and the messages name each.
PRECISION_NAMES = {
    AUTO: "auto (the best that fits)",
    "fp32": "fp32 (32-bit)",
    "bf16": "bf16 (16-bit)",
    "int8": "int8 (8-bit weights)",
    "fp8": "fp8 (8-bit float weights, newer NVIDIA GPUs)",
    "int4": "int4 (4-bit weights)",
    "q8": "q8 (8-bit, MLX)",
    "q4": "q4 (4-bit, MLX)",
}


# The --precision flag's help on `run` and `serve`.
PRECISION_HELP = ("the speech model's weights: auto (default: the best that fits by the memory "
                  "plan), fp32, bf16, int8 (bitsandbytes; CUDA and CPU), fp8 (NVIDIA GPUs "
                  "with fp8), int4 (CUDA GPUs from Ampere on, and CPU), or q8, q4 (the MLX "
                  "engine, --device mlx)")


class PrecisionError(ValueError):
    """A precision that this engine or device does not run (the message says what does)."""


def engine_of(device: str) -> str:
    """"mlx" for the MLX engine, else "torch"."""
    return "mlx" if device.strip().lower() == "mlx" else "torch"


def check_precision(precision: str, device: str) -> str:
    """`precision` if the engine `device` chooses can run it; PrecisionError saying which
    can otherwise."""
    if precision not in PRECISION_CHOICES:
        raise PrecisionError(f"unknown precision {precision!r}: choose one of "
                             f"{', '.join(PRECISION_CHOICES)}")
    engine = engine_of(device)
    offered = (AUTO, *(MLX_PRECISIONS if engine == "mlx" else TORCH_PRECISIONS))
    if precision not in offered:
        other = ("the torch engine (--device cuda or cpu)" if engine == "mlx"
                 else "the MLX engine (--device mlx)")
        raise PrecisionError(
            f"precision {precision} does not run on the {engine} engine; it takes "
            f"{', '.join(offered)} ({precision} runs on {other})")
    return precision
