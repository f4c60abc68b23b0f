"""The one precision setting on the torch engine: int8 (moshi's bitsandbytes QLinear, whose
int8 kernels run on this CPU) and fp8 weights through the loader the app uses, their token
agreement with float32 on the tiny model, what is refused where (with what runs instead),
and "auto" as the memory plan's best fit."""

from __future__ import annotations

import pytest
import torch
from moshi.utils.quantize import QLinear

from app.checkpoints.catalog import get_manifest
from app.checkpoints.loader import load_checkpoint
from app.conversation.assembly import load_speech_model
from app.conversation.config import ConversationConfig
from app.conversation.precision_choice import choose_precision
from app.engine.fp8_linear import Fp8Linear
from app.engine.precision import PrecisionError
from app.engine.quantize import int8_unavailable_reason, quantize_linears_fp8
from app.engine.torch_precision import load_torch_checkpoint
from app.plan.memory_plan import GIB, DeviceMemory
from tests.engine.test_quantize import next_token_agreement

CPU = torch.device("cpu")


def test_int8_runs_here_and_loads_through_the_apps_loader(tiny_folder):
    # bitsandbytes 0.49's CPU backend has the int8 kernels: the probe runs one layer.
    assert int8_unavailable_reason(CPU) is None
    checkpoint = load_speech_model(ConversationConfig(model_id="tiny", device="cpu",
                                                      precision="int8"))
    linears = [m for m in checkpoint.lm.modules() if isinstance(m, torch.nn.Linear)]
    assert not linears and any(isinstance(m, QLinear) for m in checkpoint.lm.modules())
    reference = load_checkpoint(get_manifest("tiny"), tiny_folder).lm
    text, audio = next_token_agreement(reference, checkpoint.lm)
    print(f"int8 (the loader's path) agreement with float32, tiny: text {text:.3f}, "
          f"audio {audio:.3f}")
    assert text >= 0.9 and audio >= 0.9


def test_fp8_weights_are_one_byte_and_mostly_agree_with_float32(tiny_folder):
    reference = load_checkpoint(get_manifest("tiny"), tiny_folder).lm
    lm = load_checkpoint(get_manifest("tiny"), tiny_folder).lm
    summary = quantize_linears_fp8(lm)
    layers = [m for m in lm.modules() if isinstance(m, Fp8Linear)]
    assert summary.layers == len(layers) > 0
    assert all(m.weight.dtype == torch.float8_e4m3fn for m in layers)
    assert summary.bytes_after < 0.3 * summary.bytes_before  # float32 -> one byte + scales
    text, audio = next_token_agreement(reference, lm)
    print(f"fp8 weight-only agreement with float32, tiny: text {text:.3f}, audio {audio:.3f}")
    # e4m3 keeps 3 mantissa bits (int8's rows keep 7): about 2.5% error per product, and a
    # random model's logits are nearly flat, so its greedy tokens flip more often than int8's.
    assert text >= 0.75 and audio >= 0.75


def test_fp8_is_refused_where_the_gpu_has_none(tiny_folder):
    with pytest.raises(PrecisionError, match=r"NVIDIA GPUs with fp8 .*8\.9.*choose int8"):
        load_torch_checkpoint(get_manifest("tiny"), tiny_folder, CPU, "fp8")


@pytest.mark.parametrize("device, precision, runs_on", [
    ("cpu", "q8", "the MLX engine"), ("cpu", "q4", "the MLX engine"),
    ("mlx", "int8", "the torch engine"), ("mlx", "fp8", "the torch engine")])
def test_a_precision_of_the_other_engine_is_refused_saying_where_it_runs(device, precision,
                                                                          runs_on):
    with pytest.raises(PrecisionError, match=runs_on):
        choose_precision(ConversationConfig(model_id="tiny", device=device,
                                            precision=precision))


def test_precision_and_dtype_that_disagree_are_refused():
    with pytest.raises(ValueError, match="disagree"):
        choose_precision(ConversationConfig(model_id="tiny", device="cpu", precision="bf16",
                                            dtype="float32"))


def _card(gigabytes: int) -> DeviceMemory:
    total = gigabytes * GIB
    return DeviceMemory("cuda", f"made-up {gigabytes} GB card", total, total,
                        precisions=("bf16", "int8", "fp8"))


@pytest.mark.parametrize("gigabytes, precision", [(24, "bf16"), (16, "int8"), (12, "int8")])
def test_auto_is_the_best_precision_that_fits_by_the_memory_plan(gigabytes, precision):
    config = ConversationConfig(model_id="context-spanning-7b", device="auto")
    choice = choose_precision(config, device_memory=_card(gigabytes))
    assert choice.precision == precision
    assert f"of {gigabytes} GB" in choice.reason and "(fits)" in choice.reason


def test_auto_on_the_cpu_is_float32_and_asked_for_is_kept():
    assert choose_precision(ConversationConfig(model_id="tiny", device="cpu")).precision == "fp32"
    chosen = choose_precision(ConversationConfig(model_id="tiny", device="cpu",
                                                 precision="int8"))
    assert (chosen.precision, chosen.reason) == ("int8", "asked for")
