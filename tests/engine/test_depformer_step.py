"""The depformer's codebook steps in fixed slots (app/engine/depformer_step.py) give moshi's
logits bit for bit: on tiny (dep_q 8), tiny-cs (dep_q 16, the release's layout) and the 7B's
depformer at a small width in bf16; for one row and three, teacher-forced codes mixed in,
frame after frame on the same rings (the previous frame's keys stay in the slots the mask
closes). A frame's sampled codes are moshi's streaming path's, draw for draw. (The engine's
step runs it: tests/bench/test_step_bench.py counts its operators against moshi's.)"""

from __future__ import annotations

import pytest
import torch
from moshi.models import LMModel, loaders

from app.bench.step_bench import SMALL_WIDTH
from app.checkpoints.architectures import personaplex_7b
from app.engine.depformer_step import DepformerSteps, forward_depformer, unsupported
from app.engine.lm_runtime import Sampling
from app.moshi_internals import as_in_moshis_layers

FRAMES = 3


def _moshis(lm: LMModel, text: torch.Tensor, out: torch.Tensor, targets: torch.Tensor,
            provided: torch.Tensor) -> list[torch.Tensor]:
    """moshi's own: its streaming depformer entered for the frame, one codebook at a time."""
    logits, previous = [], text
    with lm.depformer.streaming(text.shape[0]):
        for step in range(lm.dep_q):
            step_logits = lm.forward_depformer(step, previous[:, None, None], out)
            logits.append(step_logits)
            greedy = step_logits.float().argmax(-1)[:, 0, 0]
            previous = torch.where(provided[:, step], targets[:, step], greedy)
    return logits


def _fixed(steps: DepformerSteps, lm: LMModel, text: torch.Tensor, out: torch.Tensor,
           targets: torch.Tensor, provided: torch.Tensor) -> list[torch.Tensor]:
    logits, previous = [], text
    for step in range(lm.dep_q):  # as DepformerSteps runs it (as in moshi's layers)
        with as_in_moshis_layers(out.device):
            step_logits = forward_depformer(
                steps._modules[step], steps._rings, steps._slots[step], steps._masks[step],
                steps._heads, steps._activation, previous[:, None], out)
        logits.append(step_logits)
        greedy = step_logits.float().argmax(-1)[:, 0, 0]
        previous = torch.where(provided[:, step], targets[:, step], greedy)
    return logits


def _seven_b_depformer() -> LMModel:
    """The 7B's depformer (6 layers, 16 heads, 16 steps, context 8) at a small width, bf16;
    one temporal layer (the depformer reads only its output)."""
    config = personaplex_7b() | SMALL_WIDTH | {"num_layers": 1}
    return loaders.get_moshi_lm(None, lm_kwargs=config, device="cpu",
                                dtype=torch.bfloat16).eval()


@pytest.mark.parametrize("model", ["tiny", "tiny-cs", "7b-depformer-bf16"])
@pytest.mark.parametrize("rows", [1, 3])
def test_fixed_slots_give_moshis_logits_bit_for_bit(model, rows, request):
    torch.manual_seed(0)
    if model == "7b-depformer-bf16":
        lm = _seven_b_depformer()
    else:
        lm = request.getfixturevalue(f"{model.replace('-', '_')}_checkpoint").lm
    assert unsupported(lm) is None
    steps = DepformerSteps(lm, Sampling(greedy=True), rows)
    with torch.no_grad():
        for frame in range(FRAMES):  # the same rings, frame after frame
            text = torch.randint(0, 50, (rows,))
            out = torch.randn(rows, 1, lm.dim, dtype=lm.dtype)
            targets = torch.randint(0, lm.card, (rows, lm.dep_q))
            provided = torch.rand(rows, lm.dep_q) < 0.3
            theirs = _moshis(lm, text, out, targets, provided)
            ours = _fixed(steps, lm, text, out, targets, provided)
            for step, (a, b) in enumerate(zip(theirs, ours, strict=True)):
                assert torch.equal(a, b), f"frame {frame}, codebook step {step}"


def test_a_frames_codes_are_moshis_sampled_alike(tiny_cs_checkpoint):
    """The whole frame, sampled: the same draws from the same generator give moshi's
    streaming path's codes, teacher forcing included."""
    from app.engine.torch_runtime import TorchRuntime

    lm = tiny_cs_checkpoint.lm
    sampling = Sampling(greedy=False)
    runtime = TorchRuntime(lm, sampling)
    steps = DepformerSteps(lm, sampling, 2)
    with torch.no_grad():
        for seed in range(4):
            text = torch.randint(0, 50, (2,))
            out = torch.randn(2, 1, lm.dim)
            targets = torch.randint(0, lm.card, (2, lm.dep_q))
            provided = torch.rand(2, lm.dep_q) < 0.3
            torch.manual_seed(seed)
            theirs = runtime._depformer_step(text, out, targets, provided)
            torch.manual_seed(seed)
            ours = steps(text, out, targets, provided)
            assert torch.equal(theirs, ours)
