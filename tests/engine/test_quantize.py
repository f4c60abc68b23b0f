"""8-bit weights (moshi's bitsandbytes QLinear) on the tiny checkpoints, on this CPU: a
quarter of the linear weights' bytes, next-token agreement with float32 reported, and the
engine converses and takes span blocks with them."""

from __future__ import annotations

import torch
from moshi.utils.quantize import QLinear

from app.checkpoints.catalog import get_manifest
from app.checkpoints.loader import load_checkpoint
from app.engine import events as ev
from app.engine.quantize import quantize_linears_int8
from tests.engine.span_conversation import converse_with_a_span


def next_token_agreement(reference: torch.nn.Module, other: torch.nn.Module,
                         steps: int = 48) -> tuple[float, float]:
    """Teacher-forced: both models read the same random conversation; the share of
    positions where their greedy text token, and their greedy audio tokens, are the same."""
    generator = torch.Generator().manual_seed(0)
    codes = torch.randint(0, reference.card, (1, reference.num_codebooks, steps),
                          generator=generator)
    codes[:, 0] = torch.randint(0, reference.text_card, (1, steps), generator=generator)
    with torch.no_grad():
        a, b = reference(codes), other(codes)
    shares = []
    for name in ("text_logits", "logits"):
        la, lb = getattr(a, name).float(), getattr(b, name).float()
        valid = torch.isfinite(la).all(-1)  # positions the delays leave undefined are -inf
        shares.append((la.argmax(-1) == lb.argmax(-1))[valid].float().mean().item())
    return shares[0], shares[1]


def logit_agreement(reference: torch.nn.Module, other: torch.nn.Module,
                    steps: int = 256) -> dict[str, float]:
    """Teacher-forced, as next_token_agreement: the share of positions whose greedy text
    and audio tokens agree, and the mean relative error of the text and audio logits."""
    generator = torch.Generator().manual_seed(0)
    codes = torch.randint(0, reference.card, (1, reference.num_codebooks, steps),
                          generator=generator)
    codes[:, 0] = torch.randint(0, reference.text_card, (1, steps), generator=generator)
    with torch.no_grad():
        a, b = reference(codes), other(codes)
    result = {}
    for name, key in (("text_logits", "text"), ("logits", "audio")):
        la, lb = getattr(a, name).float(), getattr(b, name).float()
        valid = torch.isfinite(la).all(-1)  # positions the delays leave undefined are -inf
        la, lb = la[valid], lb[valid]
        result[key] = round((la.argmax(-1) == lb.argmax(-1)).float().mean().item(), 4)
        relative = (la - lb).norm(dim=-1) / la.norm(dim=-1)
        result[f"{key}_relative_error"] = round(relative.mean().item(), 4)
    return result


def test_int8_quarters_the_linear_weights_and_mostly_agrees_with_float32(tiny_folder):
    reference = load_checkpoint(get_manifest("tiny"), tiny_folder).lm
    lm = load_checkpoint(get_manifest("tiny"), tiny_folder).lm
    assert lm is not reference
    summary = quantize_linears_int8(lm)
    assert not any(isinstance(m, torch.nn.Linear) for m in lm.modules())
    assert summary.layers == sum(isinstance(m, QLinear) for m in lm.modules()) > 0
    assert all(m.weight.dtype == torch.int8 for m in lm.modules() if isinstance(m, QLinear))
    assert summary.bytes_after < 0.3 * summary.bytes_before  # float32 -> int8 plus scales
    text, audio = next_token_agreement(reference, lm)
    print(f"int8 next-token agreement with float32 (tiny): text {text:.3f}, audio {audio:.3f}")
    assert text >= 0.9 and audio >= 0.9


def test_the_engine_converses_and_takes_a_span_block_with_int8_weights(tiny_cs_checkpoint):
    quantize_linears_int8(tiny_cs_checkpoint.lm)
    engine, events = converse_with_a_span(tiny_cs_checkpoint, 20)
    ready = next(e for e in events if isinstance(e, ev.EngineReady))
    assert ready.dtype == "int8"  # what runs, as the layers say, not the float dtype
    assert engine.facts().dtype == "int8"
