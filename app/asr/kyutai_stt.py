"""Streaming speech-to-text with a Kyutai STT checkpoint, one 80 ms frame at a time, for one
conversation or for many in one batched step.

Per frame: Mimi encodes the user's 1920 samples into 32 codes, and one LMGen step of the
STT LM (no depformer) predicts one text token. The text stream was trained to trail the
audio by `audio_delay_s` (0.5 s for stt-1b-en_fr), so a token produced on model frame m
speaks of the audio at m * 80 ms - delay. Token 0 ("end of padding") marks that a word
starts, 3 is padding, anything else is a piece of the current word; this follows the
conventions of Kyutai's own STT examples (delayed-streams-modeling) and moshi-server.

`SttRows` is the model, streaming B conversations at once: the STT is an LM with the same
per-row streaming state as the speech model (moshi's LMGen keeps its offsets per row and
honours exec_mask and reset_mask), so B conversations share ONE batched step per frame, and
a row that joins is reset alone. `KyutaiStreamingStt` is one conversation's stream on a row
of it: the words and their times. A word is reported as soon as its text is complete (the
first padding after its pieces), so its end time is when its text ended, not when the next
word began.

Frames that are not the user's audio (the model's silence prefix, silence stepped at the
end of a turn to flush the delayed words out) are recorded as insertions, so that every
time reported is in seconds of user audio since the stream started. They run for their row
alone.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

import numpy as np
import torch
from moshi.models import LMGen

from app.asr.events import AsrWord
from app.asr.stt_catalog import LoadedStt
from app.frames import FRAME_S, FRAME_SAMPLES
from app.mimi_codec import torch_codec

END_OF_PADDING_ID = 0  # Kyutai STT: a word starts after this token
WORD_START_MARK = "▁"  # SentencePiece's mark of a piece that starts a new word


@dataclass(frozen=True)
class SttStep:
    """What one frame of user audio gave."""

    words: tuple[AsrWord, ...]
    end_of_speech_prob: float | None  # None when the checkpoint has no such heads
    frame_end_s: float  # user audio time at the end of this frame


class SttRows:
    """The STT's Mimi and LM streaming `rows` conversations; one thread only."""

    def __init__(self, stt: LoadedStt, rows: int = 1) -> None:
        if rows < 1:
            raise ValueError("a recogniser needs at least one row")
        self.stt = stt
        self.rows = rows
        # Greedy text, as the checkpoint's lm_gen_config (temp 0) asks. Out of sync: a row
        # that just joined yields nothing for its first step while the others go on.
        self.lm_gen = LMGen(stt.lm, use_sampling=False, temp=0.0, temp_text=0.0,
                            support_out_of_sync=rows > 1)
        self.codec = torch_codec(stt.mimi, rows)
        self._primed = [False] * rows

    @contextmanager
    def streaming(self) -> Iterator[None]:
        # No torch.no_grad() here: a stream may close after a caller's own no_grad ended,
        # and grad mode would be left off for the thread (the step and codec take it each).
        with ExitStack() as stack:
            stack.enter_context(self.codec.streaming(self.rows))
            stack.enter_context(self.lm_gen.streaming(self.rows))
            yield

    def _mask(self, rows: Sequence[int]) -> torch.Tensor:
        mask = torch.zeros(self.rows, dtype=torch.bool, device=self.stt.device)
        mask[list(rows)] = True
        return mask

    def join(self, row: int) -> None:
        """The row starts a new conversation: empty streams."""
        self.codec.join(row)
        if self.rows > 1:
            self.lm_gen.reset_streaming(self._mask([row]))
        else:
            self.lm_gen.reset_streaming()
        self._primed[row] = False

    def _lm_step(self, rows: Sequence[int], codes: torch.Tensor
                 ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """codes [A, 32] of `rows` -> their text tokens [A] and extra heads [A, classes]."""
        if self.rows == 1:
            batch = codes[:, :, None]  # [1, 32, 1]
        else:
            batch = torch.zeros((self.rows, codes.shape[1], 1), dtype=torch.long,
                                device=codes.device)
            batch[list(rows), :, 0] = codes
            self.lm_gen.set_exec_mask(self._mask(rows))
        out = self.lm_gen.step_with_extra_heads(batch)
        if out is None:  # an STT has every delay at 0: a token comes out on every step
            raise RuntimeError("the STT LM produced no token: are its delays not all 0?")
        tokens, heads = out  # tokens [B, 1, 1]; heads: [B, 1, classes] softmaxes
        if self.rows == 1:
            return tokens[:, 0, 0], [head[:, 0] for head in heads]
        index = list(rows)
        return tokens[index, 0, 0], [head[index, 0] for head in heads]

    @torch.no_grad()
    def step(self, rows: Sequence[int], pcm: np.ndarray
             ) -> tuple[list[int], list[float | None]]:
        """ONE step for `rows` (ascending), PCM [A, 1920]: each row's text token and its
        end-of-speech probability (None without those heads). The other rows stay."""
        codes = torch.from_numpy(self.codec.encode(rows, pcm)).to(self.stt.device)  # [A, 32]
        unprimed = [i for i, row in enumerate(rows) if not self._primed[row]]
        if unprimed:
            # LMGen feeds its initial tokens on a row's very first step and drops that
            # frame's codes, so the first frame goes in twice (as moshi's run_inference).
            self._lm_step([rows[i] for i in unprimed], codes[unprimed])
            for i in unprimed:
                self._primed[rows[i]] = True
        tokens, heads = self._lm_step(rows, codes)
        eos = self.stt.end_of_speech
        probs: list[float | None] = [None] * len(rows)
        if eos is not None and len(heads) > eos.head:
            probs = [float(p) for p in heads[eos.head][:, eos.label]]
        return [int(t) for t in tokens], probs


class KyutaiStreamingStt:
    """One conversation's stream on row `row` of `model` (None: a one-row model of its
    own): its words and their times in user audio. Used by one thread only."""

    def __init__(self, stt: LoadedStt, model: SttRows | None = None, row: int = 0) -> None:
        self.stt = stt
        self._own = model is None
        self.model = SttRows(stt, 1) if model is None else model
        self.row = row
        self.delay_s = stt.audio_delay_s
        self.flush_frames = math.ceil(self.delay_s / FRAME_S)
        self._model_frames = 0  # LM steps that consumed a frame (user or inserted)
        self._user_frames = 0
        self._insertions: list[tuple[float, float]] = []  # (model time, duration) in s
        self._word_ids: list[int] = []
        self._word_start_s: float | None = None
        self._boundary_s: float | None = None  # time of the last end-of-padding token
        self._streams = ExitStack()

    # ---- lifecycle ----------------------------------------------------------------------

    def start(self) -> None:
        """Join the row (entering a model of its own's streaming) and feed the model's
        silence prefix, if it wants one."""
        if self._own:
            self._streams.enter_context(self.model.streaming())
        self.model.join(self.row)
        prefix = math.ceil(self.stt.silence_prefix_s / FRAME_S)
        if prefix:
            self._insert_silence(prefix)

    def close(self) -> None:
        self._streams.close()

    # ---- stepping -----------------------------------------------------------------------

    @property
    def user_time_s(self) -> float:
        return self._user_frames * FRAME_S

    def step(self, pcm: np.ndarray) -> SttStep:
        """One frame of user audio, [1920] float32 at 24 kHz, stepped for this row alone."""
        tokens, probs = self.model.step([self.row], np.asarray(pcm, np.float32)[None])
        return self.take(tokens[0], probs[0])

    def take(self, text_id: int, end_of_speech_prob: float | None) -> SttStep:
        """The token the model gave this row for its frame of user audio (stepped with the
        others)."""
        words = self._on_model_frame(text_id)
        self._user_frames += 1
        return SttStep(tuple(words), end_of_speech_prob, self.user_time_s)

    def flush(self) -> tuple[AsrWord, ...]:
        """Step `audio_delay` of silence so the words still in flight come out now.

        Used at the end of a turn: the user is silent then, so the model sees what it
        would have seen anyway, only sooner. The inserted frames take no user time.
        """
        words = self._insert_silence(self.flush_frames)
        return tuple(words) + self._finish_word(self._model_time_s())

    # ---- internals ----------------------------------------------------------------------

    def _insert_silence(self, frames: int) -> list[AsrWord]:
        start = self._model_frames * FRAME_S
        self._insertions.append((start, frames * FRAME_S))
        silence = np.zeros((1, FRAME_SAMPLES), dtype=np.float32)
        words: list[AsrWord] = []
        for _ in range(frames):
            tokens, _probs = self.model.step([self.row], silence)
            words.extend(self._on_model_frame(tokens[0]))
        return words

    def _model_time_s(self) -> float:
        """User time spoken of by the text token of the frame just stepped."""
        return self._user_time(self._model_frames * FRAME_S - self.delay_s)

    def _user_time(self, model_t: float) -> float:
        shift = 0.0
        for start, duration in self._insertions:
            if model_t >= start + duration:
                shift += duration
            elif model_t > start:
                return max(0.0, start - shift)  # inside inserted silence: its start
            else:
                break
        return max(0.0, model_t - shift)

    def _on_model_frame(self, text_id: int) -> list[AsrWord]:
        self._model_frames += 1
        now = self._model_time_s()
        pad = self.stt.lm.text_padding_token_id
        if text_id == END_OF_PADDING_ID:
            finished = list(self._finish_word(now))
            self._boundary_s = now
            return finished
        if text_id == pad or self.stt.tokenizer.is_control(text_id):
            return list(self._finish_word(now))
        words: list[AsrWord] = []
        piece = self.stt.tokenizer.id_to_piece(text_id)
        if self._word_ids and piece.startswith(WORD_START_MARK):
            words.extend(self._finish_word(now))  # two words with no boundary between
        if not self._word_ids:
            start = self._boundary_s if self._boundary_s is not None else now
            self._word_start_s = min(start, now)
            self._boundary_s = None
        self._word_ids.append(text_id)
        return words

    def _finish_word(self, now: float) -> tuple[AsrWord, ...]:
        if not self._word_ids:
            return ()
        text = self.stt.tokenizer.decode(self._word_ids).strip()
        start = self._word_start_s if self._word_start_s is not None else now
        self._word_ids = []
        self._word_start_s = None
        if not text:
            return ()
        return (AsrWord(text, round(start, 4), round(max(start, now), 4)),)
