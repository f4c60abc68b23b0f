"""Streaming speech-to-text with a Kyutai STT checkpoint, one 80 ms frame at a time.

Per frame: Mimi encodes the user's 1920 samples into 32 codes, and one LMGen step of the
STT LM (no depformer) predicts one text token. The text stream was trained to trail the
audio by `audio_delay_s` (0.5 s for stt-1b-en_fr), so a token produced on model frame m
speaks of the audio at m * 80 ms - delay. Token 0 ("end of padding") marks that a word
starts, 3 is padding, anything else is a piece of the current word; this follows the
conventions of Kyutai's own STT examples (delayed-streams-modeling) and moshi-server.

A word is reported as soon as its text is complete (the first padding after its pieces),
so its end time is when its text ended, not when the next word began.

Frames that are not the user's audio (the model's silence prefix, silence stepped at the
end of a turn to flush the delayed words out) are recorded as insertions, so that every
time reported is in seconds of user audio since the stream started.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from moshi.models import LMGen

from app.asr.events import AsrWord
from app.asr.stt_catalog import LoadedStt
from app.frames import FRAME_S, FRAME_SAMPLES

END_OF_PADDING_ID = 0  # Kyutai STT: a word starts after this token
WORD_START_MARK = "▁"  # SentencePiece's mark of a piece that starts a new word


@dataclass(frozen=True)
class SttStep:
    """What one frame of user audio gave."""

    words: tuple[AsrWord, ...]
    end_of_speech_prob: float | None  # None when the checkpoint has no such heads
    frame_end_s: float  # user audio time at the end of this frame


class KyutaiStreamingStt:
    """Owns Mimi and the STT LM's streaming state; used by one thread only."""

    def __init__(self, stt: LoadedStt) -> None:
        self.stt = stt
        # Greedy text, as the checkpoint's lm_gen_config (temp 0) asks.
        self.lm_gen = LMGen(stt.lm, use_sampling=False, temp=0.0, temp_text=0.0)
        self.delay_s = stt.audio_delay_s
        self.flush_frames = math.ceil(self.delay_s / FRAME_S)
        self._model_frames = 0  # LM steps that consumed a frame (user or inserted)
        self._user_frames = 0
        self._insertions: list[tuple[float, float]] = []  # (model time, duration) in s
        self._word_ids: list[int] = []
        self._word_start_s: float | None = None
        self._boundary_s: float | None = None  # time of the last end-of-padding token
        self._primed = False
        self._contexts: list[Any] = []  # the streaming contexts entered by start()

    # ---- lifecycle ----------------------------------------------------------------------

    def start(self) -> None:
        """Enter streaming mode and feed the model's silence prefix, if it wants one."""
        for module in (self.stt.mimi, self.lm_gen):
            ctx = module.streaming(1)
            ctx.__enter__()
            self._contexts.append(ctx)
        prefix = math.ceil(self.stt.silence_prefix_s / FRAME_S)
        if prefix:
            self._insert_silence(prefix)

    def close(self) -> None:
        while self._contexts:
            self._contexts.pop().__exit__(None, None, None)

    # ---- stepping -----------------------------------------------------------------------

    @property
    def user_time_s(self) -> float:
        return self._user_frames * FRAME_S

    def step(self, pcm: np.ndarray) -> SttStep:
        """One frame of user audio, [1920] float32 at 24 kHz."""
        words, prob = self._frame(pcm)
        self._user_frames += 1
        return SttStep(tuple(words), prob, self.user_time_s)

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
        silence = np.zeros(FRAME_SAMPLES, dtype=np.float32)
        words: list[AsrWord] = []
        for _ in range(frames):
            words.extend(self._frame(silence)[0])
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

    def _frame(self, pcm: np.ndarray) -> tuple[list[AsrWord], float | None]:
        stt = self.stt
        frame = torch.from_numpy(np.ascontiguousarray(pcm, dtype=np.float32))
        frame = frame.to(stt.device)[None, None]  # [1, 1, 1920]
        codes = stt.mimi.encode(frame)  # [1, 32, 1]
        if not self._primed:
            # LMGen feeds its initial tokens on the very first step and drops that frame's
            # codes, so the first frame goes in twice (as moshi's run_inference does).
            self.lm_gen.step_with_extra_heads(codes)
            self._primed = True
        out = self.lm_gen.step_with_extra_heads(codes)
        if out is None:  # an STT has every delay at 0: a token comes out on every step
            raise RuntimeError("the STT LM produced no token: are its delays not all 0?")
        tokens, heads = out  # tokens [1, 1, 1]; heads: list of [1, 1, dim] softmaxes
        text_id = int(tokens[0, 0, 0])
        prob = None
        eos = stt.end_of_speech
        if eos is not None and len(heads) > eos.head:
            prob = float(heads[eos.head][0, 0, eos.label])
        self._model_frames += 1
        return self._on_token(text_id), prob

    def _on_token(self, text_id: int) -> list[AsrWord]:
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
