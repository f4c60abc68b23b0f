"""The training layout of checkpoints that read spans as blocks (the Context Spanning release),
built so that it IS the sequence the forcing generator feeds at inference.

Aligned codes (this convention): codes [B, 17, T], one conversation [17, T]; column t is
frame t whole: codes[0, t] the model's text, codes[1:9, t] the model's 8 Mimi
codes and codes[9:17, t] the user's 8 codes, all of frame t. The forcing generator writes the
user frame it is given at step t into the *target* column t, beside the model's own frame t
(stock LMGen reads a user frame one step later, so `span_layout` pairs model frame t with user
frame t + 1; not here).

What the transformer sees is moshi's delayed sequence (`_delay_sequence` with the initial token
column prepended, as `LMModel.forward` and the reference's `forward_train` build it): position
0 is the initial column, position p >= 1 holds frame p - 1's text and semantic codes (rows 0,
1, 9; delay 0) and frame p - 2's acoustic codes (the other rows; delay 1). Its text logits
predict frame p's text; codebook k's logits predict frame p - delay[k]'s code.

A span block (`span_block.block_columns`: the ids in the text row, the model's silence in its
8 rows, the user-side tone in the user's 8) goes in right before frame f (`splice_blocks`,
the reference's `assemble_training_sequence`): frame f - 1's acoustic codes MOVE into the
block's last column, which the delay puts in the column right after the block. At inference
that column is where the generator samples the acoustic codes of the frame the block swallowed
(its pending column): the model's rows, and with dep_q 16 the user's too (their given values
were overwritten by the block). So training and inference agree column for column.

The conversation's forced start (`conversation_start.plan_start`'s `ForcedStep`s, one column
per step, no loss) comes first. The generator's very first forced step only seeds its ring:
the initial tokens overwrite every row of it, so the transformer never sees it. The layout
leaves that first column out too (the reference's training keeps it: one column more than its
own inference feeds).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from moshi.models import LMModel

from app.engine.columns import ForcedStep
from app.engine.conversation_start import Placeholders
from app.engine.span_block import block_columns
from app.frames import FRAME_RATE
from app.moshi_internals import delay_sequence, initial_tokens
from app.training.span_layout import SpanInsert, SpanLayout

# MoshiRAG's delay between <ret> and the span (reference RAG_DELAY): 1 s after <ret>, 1 s
# before the cap, uniform over the whole lead with this probability.
RAG_START_S = 1.0
RAG_END_S = 1.0
RAG_UNIFORM_P = 0.2
CONTEXT_FRAMES = 3000  # the release's context: the longest window trained on
# The reference's loss weights.
TEXT_PAD_ID = 3
RET_ID = 4
PAD_WEIGHT = 0.5
RET_WEIGHT = 5.0
SEMANTIC_WEIGHT = 1.0  # the model's semantic codebook
ACOUSTIC_WEIGHT = 0.02  # every other depformer codebook, the user's included


# ---- aligned codes: the start and the blocks ---------------------------------------------


def prefix_codes(steps: Sequence[ForcedStep]) -> torch.Tensor:
    """The forced start as aligned codes [17, P], one column per step."""
    columns = [[s.text, *s.agent, *s.user] for s in steps]
    if not columns:
        return torch.zeros(0, 0, dtype=torch.long)
    return torch.tensor(columns, dtype=torch.long).T.contiguous()  # [17, P]


def acoustic_rows(placeholders: Placeholders) -> list[int]:
    """The rows at delay 1: every Mimi codebook but each side's first (semantic) one."""
    agent = len(placeholders.agent)
    user_start = 1 + agent
    return [*range(2, user_start), *range(user_start + 1, user_start + len(placeholders.user))]


@dataclass(frozen=True)
class Spliced:
    """Aligned codes with their blocks in, and the reference's masks."""

    codes: torch.Tensor  # [17, T'] long
    text_mask: torch.Tensor  # [T'] bool: text loss here
    audio_mask: torch.Tensor  # [T'] bool: audio loss here
    frame_index: torch.Tensor  # [T'] long: the column's frame in the input codes; -1: a block


def splice_blocks(codes: torch.Tensor, audio_mask: torch.Tensor, spans: Sequence[SpanInsert],
                  placeholders: Placeholders, text_mask: torch.Tensor | None = None) -> Spliced:
    """Put each span's block right before its frame f (clamped to [0, T - 1]), latest first.

    For f > 0 the block's last column takes frame f - 1's acoustic codes (model and user),
    whose own acoustic rows become the placeholders' and lose their audio loss. Block columns
    have neither loss. codes [17, T], audio_mask and text_mask [T] (None: all True)."""
    codes = codes.long().clone()
    frames = codes.shape[-1]
    text_mask = (torch.ones(frames, dtype=torch.bool) if text_mask is None
                 else text_mask.bool().clone())
    audio_mask = audio_mask.bool().clone()
    frame_index = torch.arange(frames)
    moved = acoustic_rows(placeholders)
    silent = torch.from_numpy(block_columns([0], placeholders, codes.shape[0]))[moved, 0]  # [14]
    # sorted() is stable under reverse=True: spans at the same frame keep their order.
    for span in sorted(spans, key=lambda s: s.frame, reverse=True):
        if not span.ids:
            raise ValueError("a span block needs at least one id")
        block = torch.from_numpy(block_columns(span.ids, placeholders, codes.shape[0]))  # [17, n]
        n = block.shape[-1]
        f = max(0, min(int(span.frame), codes.shape[-1] - 1))
        if f > 0:  # the MOVE
            block[moved, n - 1] = codes[moved, f - 1]
            codes[moved, f - 1] = silent
            audio_mask[f - 1] = False
        off = torch.zeros(n, dtype=torch.bool)
        codes = torch.cat([codes[:, :f], block, codes[:, f:]], dim=1)
        text_mask = torch.cat([text_mask[:f], off, text_mask[f:]])
        audio_mask = torch.cat([audio_mask[:f], off, audio_mask[f:]])
        frame_index = torch.cat([frame_index[:f], torch.full((n,), -1), frame_index[f:]])
    return Spliced(codes, text_mask, audio_mask, frame_index)


# ---- where spans land, and which window is trained -----------------------------------------


def sample_rag_delay(d_lead: int, rng: random.Random) -> int:
    """Frames from <ret> to the span, MoshiRAG's rule: uniform over [0, d_lead] when the lead
    is short (under 2 s) or with probability 0.2, else uniform over [1 s, lead - 1 s] (bounds
    with Python's round, i.e. to even on .5)."""
    start, end = RAG_START_S * FRAME_RATE, RAG_END_S * FRAME_RATE
    d_lead = int(d_lead)
    if d_lead < start + end or rng.random() < RAG_UNIFORM_P:
        delay = rng.randint(0, d_lead)
    else:
        low, high = round(start), round(d_lead - end)
        delay = rng.randint(low, high) if high >= low else rng.randint(0, d_lead)
    return min(delay, d_lead)


def inject_frame(ret_frame: int, cap_frame: int, rng: random.Random) -> int:
    """The frame a span lands before: at least one frame after its <ret>, mostly before the
    cap (the grounded answer's body)."""
    d_lead = max(1, cap_frame - ret_frame)
    return ret_frame + max(1, sample_rag_delay(d_lead, rng))


def window_start(length: int, context: int, rng: random.Random) -> int:
    """First frame of the trained window: a random one when the sequence exceeds `context`."""
    if length <= context:
        return 0
    return rng.randint(0, length - context)


# ---- the delayed sequence and its masks ------------------------------------------------------


def build_block_layout(
    lm: LMModel,
    codes: torch.Tensor,
    spans: Sequence[SpanInsert],
    placeholders: Placeholders,
    prefix: torch.Tensor | None = None,
    text_mask: torch.Tensor | None = None,
    audio_mask: torch.Tensor | None = None,
    audio_loss: bool = True,
    context: int | None = None,
    rng: random.Random | None = None,
) -> SpanLayout:
    """One conversation's training sequence: blocks spliced into codes [17, T] (spans in its
    frames), the forced start prefix [17, P] before it (no loss), the window cut to `context`
    frames (at random, with `rng`, when longer), then delayed as the transformer reads it.

    text_mask / audio_mask [T]: the frames whose text / audio is learnt (None: all).
    Returns a batch of one: targets[:, :, p] is the column fed at p + 1."""
    streams, frames = codes.shape
    if streams != lm.num_codebooks:
        raise ValueError(f"codes have {streams} streams, the model {lm.num_codebooks}")
    if prefix is None or prefix.numel() == 0:
        prefix = torch.zeros(streams, 0, dtype=torch.long)
    p = prefix.shape[-1]
    off = torch.zeros(p, dtype=torch.bool)
    on = torch.ones(frames, dtype=torch.bool)
    seq = torch.cat([prefix.long().cpu(), codes.long().cpu()], dim=1)  # [17, P + T]
    text_on = torch.cat([off, on if text_mask is None else text_mask.bool().cpu()])
    audio_on = torch.cat([off, on if audio_mask is None else audio_mask.bool().cpu()])
    # Spans clamped into the conversation's frames (the reference's rule), then spliced
    # with the start in front: a block right after the start moves the start's last
    # (placeholder) acoustic codes, as the generator samples them again after the block.
    inside = [replace(s, frame=p + max(0, min(int(s.frame), frames - 1))) for s in spans]
    spliced = splice_blocks(seq, audio_on, inside, placeholders, text_on)
    seq, text_on, audio_on = spliced.codes, spliced.text_mask, spliced.audio_mask
    is_block = spliced.frame_index < 0
    frame_of = torch.where(spliced.frame_index >= p, spliced.frame_index - p, -1)
    # The generator's first column is the initial tokens in place of the first frame.
    seq, text_on, audio_on, is_block, frame_of = (
        x[..., 1:] for x in (seq, text_on, audio_on, is_block, frame_of))
    if context is not None and seq.shape[-1] > context:
        if rng is None:
            raise ValueError("a sequence longer than the context needs an rng for its window")
        s0 = window_start(seq.shape[-1], context, rng)
        seq, text_on, audio_on, is_block, frame_of = (
            x[..., s0 : s0 + context] for x in (seq, text_on, audio_on, is_block, frame_of))

    initial = initial_tokens(lm).cpu()  # [1, 17, 1]
    targets = delay_sequence(lm.delays, seq[None], initial)  # [1, 17, S]
    inputs = torch.cat([initial, targets[:, :, :-1]], dim=2)  # [1, 17, S]
    # A frame's masks follow its codes through the delays.
    audio_delayed = delay_sequence(lm.delays, audio_on[None, None].expand(1, streams, -1),
                                   torch.zeros(1, streams, 1, dtype=torch.bool))  # [1, 17, S]
    text_loss_mask = text_on[None] & (targets[:, 0] >= 0) & (targets[:, 0] < lm.text_card)
    rows = slice(lm.audio_offset, lm.audio_offset + lm.dep_q)
    audio_targets = targets[:, rows]  # [1, dep_q, S]
    audio_loss_mask = audio_delayed[:, rows] & (audio_targets >= 0) & (audio_targets < lm.card)
    if not audio_loss:
        audio_loss_mask = torch.zeros_like(audio_loss_mask)
    span_mask = torch.cat([torch.zeros(1, dtype=torch.bool), is_block[:-1]])
    return SpanLayout(
        inputs=inputs,
        targets=targets,
        frame_positions=torch.nonzero(frame_of >= 0)[:, 0],  # where frame t's text is predicted
        span_mask=span_mask,  # [S]: the input at p is a block column
        text_loss_mask=text_loss_mask,  # [1, S]
        audio_loss_mask=audio_loss_mask,  # [1, dep_q, S]
    )


# ---- the reference's loss ------------------------------------------------------------------


def text_loss_weights(text_targets: torch.Tensor, mask: torch.Tensor, pad_id: int = TEXT_PAD_ID,
                      ret_id: int | None = RET_ID) -> torch.Tensor:
    """[B, S] float: 1 where learnt, x0.5 on padding, x5 on <ret>; 0 elsewhere."""
    weights = mask.float()
    weights = torch.where(text_targets == pad_id, weights * PAD_WEIGHT, weights)
    if ret_id is not None:
        weights = torch.where(text_targets == ret_id, weights * RET_WEIGHT, weights)
    return weights


def audio_codebook_weights(dep_q: int) -> torch.Tensor:
    """[dep_q]: 1.0 on the model's semantic codebook, 0.02 on the others (user's included)."""
    weights = torch.full((dep_q,), ACOUSTIC_WEIGHT)
    weights[0] = SEMANTIC_WEIGHT
    return weights


def _weighted_ce(logits: torch.Tensor, targets: torch.Tensor, weights: torch.Tensor
                 ) -> torch.Tensor:
    """sum(CE x weight) / max(1, sum(weight)), the reference's normalisation."""
    keep = weights > 0
    ce = F.cross_entropy(logits[keep].float(), targets[keep], reduction="none")
    return (ce * weights[keep]).sum() / weights.sum().clamp_min(1.0)


def block_layout_losses(lm: LMModel, layout: SpanLayout, audio: bool,
                        pad_id: int = TEXT_PAD_ID, ret_id: int | None = RET_ID
                        ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The weighted text and audio cross-entropies over one forward of the layout."""
    device = lm.device
    inputs = layout.inputs.to(device)  # [B, 17, S]
    targets = layout.targets.to(device)  # [B, 17, S]
    transformer_out, text_logits = lm.forward_text(inputs)  # [B, S, dim], [B, 1, S, card]
    weights = text_loss_weights(targets[:, 0], layout.text_loss_mask.to(device), pad_id, ret_id)
    text_loss = _weighted_ce(text_logits[:, 0], targets[:, 0], weights)
    if not audio:
        return text_loss, None
    logits = lm.forward_depformer_training(targets, transformer_out)  # [B, dep_q, S, card]
    audio_targets = targets[:, lm.audio_offset : lm.audio_offset + lm.dep_q]  # [B, dep_q, S]
    cb = audio_codebook_weights(lm.dep_q).to(device)
    audio_weights = layout.audio_loss_mask.to(device).float() * cb[None, :, None]
    return text_loss, _weighted_ce(logits, audio_targets, audio_weights)


# ---- what the trainer uses for a block checkpoint ---------------------------------------------


@dataclass(frozen=True)
class BlockTraining:
    """Layout and loss for a checkpoint whose manifest places spans as blocks."""

    placeholders: Placeholders
    pad_id: int = TEXT_PAD_ID
    ret_id: int | None = RET_ID

    def layout(self, lm: LMModel, codes: torch.Tensor, spans: Sequence[SpanInsert],
               answer_frames: torch.Tensor | None, prefix: torch.Tensor | None, audio: bool,
               rng: random.Random) -> SpanLayout:
        """codes [17, T]; answer_frames [T] (text loss there; None: every frame); the audio
        loss on every frame, as in the reference."""
        return build_block_layout(lm, codes, spans, self.placeholders, prefix, answer_frames,
                                  None, audio, lm.context or CONTEXT_FRAMES, rng)

    def losses(self, lm: LMModel, layout: SpanLayout, audio: bool
               ) -> tuple[torch.Tensor, torch.Tensor | None]:
        return block_layout_losses(lm, layout, audio, self.pad_id, self.ret_id)


def checkpoint_placeholders(checkpoint) -> Placeholders:
    """The block and start placeholders exactly as the engine picks them."""
    from app.engine.conversation_start import placeholder_codes

    manifest = checkpoint.manifest
    placement, start = manifest.span_placement, manifest.conversation_start
    return placeholder_codes(checkpoint.mimi, placement.agent_codes or start.agent_silence_codes,
                             placement.user_codes or start.user_tone_codes)


def block_training_for(checkpoint) -> BlockTraining | None:
    """Block layout and loss for a `span_placement: block` checkpoint; None for the others
    (they keep `span_layout`)."""
    manifest = checkpoint.manifest
    if manifest.span_placement.kind != "block":
        return None
    retrieval = manifest.retrieval
    ret_id = retrieval.ret_id if retrieval.trigger == "ret_token" else None
    return BlockTraining(checkpoint_placeholders(checkpoint),
                         checkpoint.lm.text_padding_token_id, ret_id)
