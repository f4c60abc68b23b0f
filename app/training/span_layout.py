"""The training layout of span-injected conversations: ONE definition, shared with inference.

The streaming engine feeds the temporal transformer two kinds of positions:
- a *frame column* per LMGen step: the conversation's codes after the acoustic delays, with
  the initial token where a stream has nothing yet (LMGen reads them from its token ring);
- *span columns*, put in between two steps by the span injector: text ids in stream 0 and
  the zero token (-1, an exact zero embedding) in the 16 audio streams.

A model fine-tuned to read spans must see, in training, exactly that sequence. So the delays
are applied to the ordinary frames FIRST (as `LMModel.forward` does, with moshi's own
`_delay_sequence` and initial token column) and only THEN are span columns inserted. Putting
spans into the raw codes before delaying would smear each span across the delayed streams
and shift the acoustic tokens around it: a layout inference never produces.

Time conventions (T frames of codes, S = T + all span positions):
- codes [B, 17, T] are aligned frames: codes[:, :9, t] is the model's frame t (text, then 8
  Mimi codebooks), codes[:, 9:, t] the user frame that LMGen.step receives at step t + 1
  (LMGen reads a user frame one step after it was given; `codes_from_stream` does the shift).
- frame column t (the input of step t) holds the delayed codes of frame t - 1, the initial
  token column at t = 0; its text logits predict codes[:, 0, t].
- a span with `frame == f` is injected between steps f - 1 and f, i.e. right before frame
  column f (f == 0: before the very first step; f == T: after the last one).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from moshi.models import LMModel

from app.engine.span_text import SpanTokenizer
from app.moshi_internals import delay_sequence, initial_tokens


@dataclass(frozen=True)
class SpanInsert:
    """One injected span: its token ids (wrapping included) and the step it lands before."""

    frame: int
    ids: tuple[int, ...]

    @classmethod
    def from_text(cls, span_tokenizer: SpanTokenizer, text: str, frame: int) -> SpanInsert:
        """Tokenized exactly as the injector does (same sanitising, wrapping, truncation)."""
        return cls(frame, span_tokenizer.encode(text).ids)


@dataclass(frozen=True)
class SpanLayout:
    """A training sequence in the engine's layout, with its targets and loss masks."""

    inputs: torch.Tensor  # [B, 17, S] long: what the temporal transformer sees, in order
    targets: torch.Tensor  # [B, 17, S] long: delayed codes each position predicts; -1 on spans
    frame_positions: torch.Tensor  # [T] long: index in S of frame column t
    span_mask: torch.Tensor  # [S] bool: True on span columns
    text_loss_mask: torch.Tensor  # [B, S] bool: text cross-entropy here (answer frames only)
    audio_loss_mask: torch.Tensor  # [B, dep_q, S] bool: depformer loss here (all False if off)

    @property
    def text_targets(self) -> torch.Tensor:
        return self.targets[:, 0]  # [B, S]

    @property
    def audio_targets(self) -> torch.Tensor:
        return self.targets[:, 1:]  # [B, 16, S]; the depformer predicts the first dep_q


def span_columns(
    ids: Sequence[int], batch: int, num_codebooks: int, zero_token_id: int
) -> torch.Tensor:
    """The K positions of one span as codes [B, 17, K]: text in stream 0, -1 elsewhere.

    The same positions `app.engine.span_injector.span_positions` feeds (without CFG)."""
    cols = torch.full((batch, num_codebooks, len(ids)), zero_token_id, dtype=torch.long)
    cols[:, 0, :] = torch.tensor(list(ids), dtype=torch.long)
    return cols  # [B, 17, K]


def codes_from_stream(model_frames: torch.Tensor, user_frames: torch.Tensor) -> torch.Tensor:
    """Aligned codes [B, 17, T] from what a streaming run produced and was given.

    model_frames [B, 9, T]: LMGen.step's outputs of steps 1..T (each returns the model's
    previous frame, text and audio aligned). user_frames [B, 8, T + 1]: the user codes given
    to steps 0..T. LMGen never shows the transformer the user frame of step 0, so user frame
    t + 1 sits beside model frame t.
    """
    if user_frames.shape[-1] != model_frames.shape[-1] + 1:
        raise ValueError("user_frames needs one frame more than model_frames")
    return torch.cat([model_frames, user_frames[:, :, 1:]], dim=1)  # [B, 17, T]


def _delayed_frames(lm: LMModel, codes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The frame columns (inputs) and their targets, exactly as LMModel.forward builds them."""
    batch = codes.shape[0]
    initial = initial_tokens(lm).to(codes.device).expand(batch, -1, -1)  # [B, 17, 1]
    delayed = delay_sequence(lm.delays, codes, initial)  # [B, 17, T]
    inputs = torch.cat([initial, delayed[:, :, :-1]], dim=2)  # [B, 17, T]: column t = step t
    return inputs, delayed  # column t of `delayed` is what step t predicts


def build_layout(
    lm: LMModel,
    codes: torch.Tensor,
    spans: Sequence[SpanInsert] = (),
    answer_frames: torch.Tensor | None = None,
    audio_loss: bool = False,
) -> SpanLayout:
    """Delay the frames, then insert the span columns; masks keep the loss off spans.

    codes [B, 17, T] long (see the module docstring for their alignment). answer_frames
    [B, T] bool: frames whose text (and audio, with `audio_loss`) is trained on; None: all.
    Spans landing at the same frame keep their order.
    """
    batch, streams, frames = codes.shape
    if streams != lm.num_codebooks:
        raise ValueError(f"codes have {streams} streams, the model {lm.num_codebooks}")
    for span in spans:
        if not 0 <= span.frame <= frames:
            raise ValueError(f"span at frame {span.frame} is outside 0..{frames}")
        if not span.ids:
            raise ValueError("a span needs at least one position")
    codes = codes.long().cpu()
    frame_inputs, frame_targets = _delayed_frames(lm, codes)  # [B, 17, T] each
    if answer_frames is None:
        answer_frames = torch.ones(batch, frames, dtype=torch.bool)
    answer_frames = answer_frames.bool().cpu()
    # The answer mask follows each stream's delay, like the codes it selects.
    answer_delayed = delay_sequence(
        lm.delays,
        answer_frames[:, None, :].expand(-1, streams, -1),
        torch.zeros(batch, streams, 1, dtype=torch.bool),
    )  # [B, 17, T]
    zero = lm.zero_token_id

    order = sorted(range(len(spans)), key=lambda i: (spans[i].frame, i))
    inputs, targets, masks, is_span, frame_positions = [], [], [], [], []
    position = 0
    cursor = 0

    def add_span(span: SpanInsert) -> None:
        nonlocal position
        cols = span_columns(span.ids, batch, streams, zero)  # [B, 17, K]
        inputs.append(cols)
        targets.append(torch.full_like(cols, zero))
        masks.append(torch.zeros(batch, streams, len(span.ids), dtype=torch.bool))
        is_span.append(torch.ones(len(span.ids), dtype=torch.bool))
        position += len(span.ids)

    for t in range(frames):
        while cursor < len(order) and spans[order[cursor]].frame == t:
            add_span(spans[order[cursor]])
            cursor += 1
        inputs.append(frame_inputs[:, :, t : t + 1])
        targets.append(frame_targets[:, :, t : t + 1])
        masks.append(answer_delayed[:, :, t : t + 1])
        is_span.append(torch.zeros(1, dtype=torch.bool))
        frame_positions.append(position)
        position += 1
    while cursor < len(order):  # spans after the last frame
        add_span(spans[order[cursor]])
        cursor += 1

    seq_inputs = torch.cat(inputs, dim=2)  # [B, 17, S]
    seq_targets = torch.cat(targets, dim=2)  # [B, 17, S]
    seq_masks = torch.cat(masks, dim=2)  # [B, 17, S]
    text_valid = (seq_targets[:, 0] >= 0) & (seq_targets[:, 0] < lm.text_card)
    text_loss_mask = seq_masks[:, 0] & text_valid  # [B, S]
    dep_q = lm.dep_q
    audio = seq_targets[:, lm.audio_offset : lm.audio_offset + dep_q]  # [B, dep_q, S]
    audio_loss_mask = seq_masks[:, lm.audio_offset : lm.audio_offset + dep_q]
    audio_loss_mask = audio_loss_mask & (audio >= 0) & (audio < lm.card)  # not init, not -1
    if not audio_loss:
        audio_loss_mask = torch.zeros_like(audio_loss_mask)
    return SpanLayout(
        inputs=seq_inputs,
        targets=seq_targets,
        frame_positions=torch.tensor(frame_positions, dtype=torch.long),
        span_mask=torch.cat(is_span),
        text_loss_mask=text_loss_mask,
        audio_loss_mask=audio_loss_mask,
    )
