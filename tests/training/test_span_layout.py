"""The training layout IS what the streaming engine feeds: same inputs, same text logits.

A streaming run (greedy LMGen steps, spans injected between frames by the engine's own
`prefill`, rings widened like the engine) records every input the temporal transformer was
given and every text logit it produced. The layout builder, fed only the conversation's codes
and the spans, must rebuild that exact input sequence, and ONE offline forward over it must
give the same text logits at every position.
"""

from __future__ import annotations

import copy

import pytest
import torch
from moshi.models import LMGen

from app.checkpoints.catalog import get_manifest
from app.checkpoints.loader import load_checkpoint
from app.engine.kv_ring import widen_attention_rings
from app.engine.position_forwards import positions_codes
from app.engine.span_text import SpanTokenizer
from app.training.span_layout import SpanInsert, build_layout, codes_from_stream

TOL = 1e-4


def prefill(gen: LMGen, ids) -> None:
    """A span's positions read as the engine reads them: ONE forward of positions_codes."""
    with torch.no_grad():
        gen.lm_model.forward_text(positions_codes(gen.lm_model, list(ids)))
TEXTS = [
    "the capital of australia is canberra",
    "weather in berlin today: sunny and warm, light wind from the west",
    "note: the meeting moved to friday at ten",
]
LONG_TEXT = " ".join(TEXTS * 6)  # truncated to the manifest's max_span_tokens


@pytest.fixture(scope="module")
def checkpoint(tiny_folder):
    return load_checkpoint(get_manifest("tiny"), tiny_folder, device="cpu")


def _record_forward_text(lm) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Wrap lm.forward_text (what LMGen's step and the injector both call) to record it."""
    calls: list[tuple[torch.Tensor, torch.Tensor]] = []
    original = lm.forward_text

    def recording(sequence, *args, **kwargs):
        out, text_logits = original(sequence, *args, **kwargs)
        calls.append((sequence.clone(), text_logits.clone()))
        return out, text_logits

    lm.forward_text = recording
    return calls


def _stream(checkpoint, steps: int, spans: list[SpanInsert], seed: int):
    """Run `steps` frames, injecting each span before its frame: greedy text, the model's
    audio teacher-forced (known codes replace the depformer, which only costs time here).
    Returns the aligned codes, the fed inputs [1, 17, S'] and the streaming text logits
    [1, 1, S', card]."""
    lm = copy.deepcopy(checkpoint.lm)
    calls = _record_forward_text(lm)
    gen = LMGen(lm, use_sampling=False)
    gen.streaming_forever(1)
    widen_attention_rings(lm, max(len(s.ids) for s in spans))
    generator = torch.Generator().manual_seed(seed)
    user = torch.randint(0, lm.card, (1, 8, steps), generator=generator)  # [1, 8, steps]
    audio = torch.randint(0, lm.card, (1, 8, steps), generator=generator)  # [1, 8, steps]
    outputs = []
    for step in range(steps):
        for span in spans:
            if span.frame == step:
                prefill(gen, span.ids)
        out = gen.step(  # [1, 9, 1], None at step 0
            user[:, :, step : step + 1], depformer_replace_tokens=audio[:, :, step : step + 1]
        )
        if out is not None:
            outputs.append(out)
    codes = codes_from_stream(torch.cat(outputs, dim=2), user)  # [1, 17, steps - 1]
    fed = torch.cat([c[0] for c in calls], dim=2)  # [1, 17, S']
    logits = torch.cat([c[1] for c in calls], dim=2)  # [1, 1, S', card]
    return codes, fed, logits


def _spans(tokenizer: SpanTokenizer, frames: list[int], long: bool = False) -> list[SpanInsert]:
    texts = [LONG_TEXT] * len(frames) if long else TEXTS
    return [SpanInsert.from_text(tokenizer, texts[i % len(texts)], f) for i, f in enumerate(frames)]


@pytest.mark.parametrize(
    ("steps", "frames"),
    [
        (10, [0]),  # a span before the very first step
        (14, [6]),  # mid-conversation
        (16, [3, 9]),  # two spans
        (18, [5, 5]),  # two spans between the same two frames
        (260, [2, 120, 250]),  # long spans: S > the tiny model's context (375)
    ],
    ids=["start", "middle", "two", "same-frame", "past-context"],
)
def test_offline_forward_over_the_layout_equals_streaming(checkpoint, steps, frames):
    lm = checkpoint.lm
    tokenizer = SpanTokenizer(
        checkpoint.tokenizer, checkpoint.manifest.span_wrapping, checkpoint.manifest.max_span_tokens
    )
    spans = _spans(tokenizer, frames, long=steps > 100)
    codes, fed, stream_logits = _stream(checkpoint, steps, spans, seed=steps)
    layout = build_layout(lm, codes, spans)
    length = layout.inputs.shape[2]  # S: every column up to step steps - 2's (its target known)
    if steps > 100:
        assert length > lm.context + 100 and max(len(s.ids) for s in spans) > 100
    # 1. The layout is exactly the sequence the engine fed, column for column.
    assert torch.equal(layout.inputs, fed[:, :, :length])
    # 2. One offline forward (no streaming state: the plain causal mask with the context).
    offline = copy.deepcopy(lm)
    with torch.no_grad():
        _, offline_logits = offline.forward_text(layout.inputs)  # [1, 1, S, card]
    diff = (offline_logits - stream_logits[:, :, :length]).abs()  # [1, 1, S, card]
    assert diff[0, 0, layout.frame_positions].max().item() < TOL
    assert diff.max().item() < TOL  # span positions too
    # 3. The targets are what the greedy stream chose: argmax of each frame's text logits.
    chosen = offline_logits[0, 0, layout.frame_positions].argmax(-1)  # [T]
    assert torch.equal(chosen, layout.text_targets[0, layout.frame_positions])
    # 4. Masks: no loss on span positions, text loss on every frame (no answer mask given).
    assert not layout.text_loss_mask[0, layout.span_mask].any()
    assert layout.text_loss_mask[0, layout.frame_positions].all()
    assert int(layout.span_mask.sum()) == sum(len(s.ids) for s in spans)


def test_spans_inserted_before_the_delays_give_a_layout_inference_never_sees(checkpoint):
    """The trap: span columns put into the raw codes and then delayed."""
    lm = checkpoint.lm
    tokenizer = SpanTokenizer(checkpoint.tokenizer, checkpoint.manifest.span_wrapping, 64)
    span = _spans(tokenizer, [5])[0]
    codes, fed, _ = _stream(checkpoint, 12, [span], seed=1)
    right = build_layout(lm, codes, [span])
    k = len(span.ids)
    span_cols = torch.full((1, 17, k), lm.zero_token_id, dtype=torch.long)
    span_cols[:, 0] = torch.tensor(span.ids)
    raw = torch.cat([codes[:, :, :4], span_cols, codes[:, :, 4:]], dim=2)  # before frame 5
    wrong = build_layout(lm, raw)
    assert torch.equal(right.inputs, fed[:, :, : right.inputs.shape[2]])
    assert right.inputs.shape == wrong.inputs.shape
    assert not torch.equal(wrong.inputs, right.inputs)


def test_answer_frames_select_the_text_loss_and_follow_the_audio_delays(checkpoint):
    lm = checkpoint.lm
    frames = 8
    codes = torch.randint(0, lm.card, (1, 17, frames), generator=torch.Generator().manual_seed(0))
    answer = torch.zeros(1, frames, dtype=torch.bool)
    answer[0, 4:] = True
    layout = build_layout(lm, codes, [SpanInsert(4, (10, 11, 12))], answer, audio_loss=True)
    pos = layout.frame_positions
    assert layout.text_loss_mask[0, pos].tolist() == answer[0].tolist()
    # Semantic codebook (delay 0) follows the answer frames; acoustic ones one column later.
    assert layout.audio_loss_mask[0, 0, pos].tolist() == answer[0].tolist()
    assert layout.audio_loss_mask[0, 1, pos].tolist() == [False] * 5 + [True] * 3
    assert not layout.audio_loss_mask[:, :, layout.span_mask].any()
