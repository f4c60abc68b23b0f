"""Which precision the speech model loads at, from a ConversationConfig: the one asked for,
or with "auto" the best that fits by the memory plan (app/plan/memory_plan.py), with the
plan's sentence as the reason.

The run's and the server's `--dtype` still choose fp32 or bf16 when no precision is given
(float16, which has no precision name, stays a dtype: `PrecisionChoice.dtype`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from app.conversation.config import ConversationConfig
from app.engine.precision import AUTO, FLOAT_DTYPES, check_precision
from app.plan.memory_plan import DeviceMemory

log = logging.getLogger(__name__)

_FROM_DTYPE = {dtype: name for name, dtype in FLOAT_DTYPES.items()}
# The precision where no plan can be made (the survey failed), by where the model runs.
_FALLBACK = {"cuda": "bf16", "mps": "bf16", "cpu": "fp32"}


@dataclass(frozen=True)
class PrecisionChoice:
    precision: str  # fp32, bf16, int8, fp8, int4 (torch); fp32, bf16, q8, q4 (MLX); "auto": dtype
    reason: str  # for the loading message: "asked for", or the plan's sentence
    dtype: str | None = None  # a torch dtype name that has no precision (float16)


def _dtype_choice(config: ConversationConfig, mlx: bool) -> PrecisionChoice:
    name = _FROM_DTYPE.get(config.dtype)
    if name is not None:
        return PrecisionChoice(name, f"--dtype {config.dtype}")
    if mlx:
        raise ValueError(f"dtype {config.dtype} does not run on the MLX engine: give "
                         "--precision fp32, bf16, q8 or q4")
    return PrecisionChoice(AUTO, f"--dtype {config.dtype}", dtype=config.dtype)


def _device_kind(config: ConversationConfig) -> str:
    from app.engine.device import choose_device, uses_mlx

    if uses_mlx(config.device):
        return "mlx"
    return choose_device(config.device).type


def _planned(config: ConversationConfig, kind: str,
             device_memory: DeviceMemory | None) -> PrecisionChoice:
    """The best precision that fits by the memory plan; the device's usual one when no plan
    can be made."""
    if kind == "cpu":  # the torch engine on a CPU loads float32 (loader.runtime_dtype)
        return PrecisionChoice("fp32", "the CPU runs float32")
    try:
        from app.plan.memory_survey import survey_memory

        report = survey_memory(
            config.model_id,
            folder=Path(config.custom_folder).expanduser() if config.custom_folder else None,
            device=kind, device_memory=device_memory, stt_model=config.stt_model,
            llm_backend=config.backend,
            llm_host=config.host or None, llm_model=config.model or None)
    except Exception as exc:  # a plan is advice: loading goes on at the usual precision
        log.warning("no memory plan for %s (%s): loading at the usual precision",
                    config.model_id, exc)
        if kind == "mlx":
            from app.engine.mlx.checkpoint import default_mlx_precision

            return PrecisionChoice(default_mlx_precision(), f"no memory plan ({exc})")
        return PrecisionChoice(_FALLBACK.get(kind, "bf16"), f"no memory plan ({exc})")
    if report.precision is None:
        return PrecisionChoice(_FALLBACK.get(kind, "bf16"), "the memory plan chose none")
    verdict = "fits" if report.fits else "does not fit even so"
    return PrecisionChoice(report.precision, f"{report.plan.sentence()} ({verdict})")


def choose_precision(config: ConversationConfig, device_memory: DeviceMemory | None = None
                     ) -> PrecisionChoice:
    """The precision `config` loads at (PrecisionError for one its engine does not run).
    `device_memory`: plan for this device instead of probing the one `config` names (tests
    plan for made-up machines)."""
    precision = check_precision(config.precision or AUTO, config.device)
    kind = _device_kind(config)
    if device_memory is not None and kind != "mlx":
        kind = device_memory.kind
    given_dtype = config.dtype not in ("", AUTO)
    if precision != AUTO:
        if given_dtype and FLOAT_DTYPES.get(precision) != config.dtype:
            raise ValueError(f"precision {precision} and dtype {config.dtype} disagree: "
                             "give one")
        return PrecisionChoice(precision, "asked for")
    if given_dtype:
        return _dtype_choice(config, kind == "mlx")
    return _planned(config, kind, device_memory)
