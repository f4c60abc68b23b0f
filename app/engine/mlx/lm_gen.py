"""Vanilla Moshi's generator on MLX: moshi 0.2.13's `LMGen` bookkeeping, and span positions.

As `LMGen.step` (batch 1, no CFG): a ring of max_delay + 2 columns; the user's frame is
written at offset + its delays; the column at `offset` is fed (rows whose delay has not
passed read the initial token); the text is sampled, then the depformer's dep_q steps, each
fed the previous sample; they are written at offset + 1, and the frame that is complete
(offset - max_delay, undelayed) is returned, None while the delays fill.

A span goes in as `span_injector.span_positions` does for torch: K positions of text ids
in stream 0 and the zero token (-1) in the 16 audio streams, in ONE forward; only the
transformer's state advances (its RoPE offset, its KV ring), the frame bookkeeping stays.
"""

from __future__ import annotations

from collections.abc import Sequence

import mlx.core as mx
import numpy as np

from app.engine.mlx.generator_base import UNGENERATED, MlxGeneratorBase
from app.engine.mlx.lm import ZERO_TOKEN
from app.engine.mlx.sampling import sample


class MlxLmGen(MlxGeneratorBase):
    def _reset_bookkeeping(self) -> None:
        self.cache = np.full((self.num_codebooks, self.max_delay + 2), UNGENERATED, np.int64)
        self.last_text: int | None = None  # the text token the latest step chose

    def step(self, user: Sequence[int], forced_audio: Sequence[int] | None = None
             ) -> np.ndarray | None:
        """One frame: the user's codes in -> [1 + dep_q] (text, the model's codes) out, or
        None while the delays fill. `forced_audio`: the model's dep_q codes given instead of
        the depformer's (moshi's `depformer_replace_tokens`: teacher forcing)."""
        cache, columns = self.cache, self.cache.shape[1]
        user_rows = np.arange(self.dep_q + 1, self.num_codebooks)
        given = np.asarray(user, dtype=np.int64)[: len(user_rows)]
        if len(given) < len(user_rows):
            raise ValueError(f"{len(user_rows)} user codes needed, {len(given)} given")
        cache[user_rows, (self.offset + self.delays[user_rows]) % columns] = given
        column = cache[:, self.offset % columns].copy()
        young = self.offset <= self.delays
        column[young] = self.initial[young]
        out, text_logits = self.lm.forward_text(mx.array(column[None, :, None]), self.stream)
        s = self.sampling
        text = sample(text_logits[:, -1], s.greedy, s.temp_text, s.top_k_text)  # [1]
        audio: list[mx.array] = []
        if forced_audio is None:
            depformer = self.lm.new_depformer_stream()
            previous = text
            for _ in range(self.dep_q):
                logits = self.lm.forward_depformer(previous, out, depformer)
                previous = sample(logits, s.greedy, s.temp, s.top_k)
                audio.append(previous)
        elif len(forced_audio) != self.dep_q:
            raise ValueError(f"{self.dep_q} forced audio codes needed, {len(forced_audio)} given")
        mx.eval(text, *audio, *self.stream.arrays())
        self.offset += 1
        target = self.offset % columns
        self.last_text = int(text[0])
        cache[0, target] = self.last_text
        cache[1 : 1 + self.dep_q, target] = (
            [int(a[0]) for a in audio] if forced_audio is None else list(forced_audio))
        if self.offset <= self.max_delay:
            return None
        index = (self.offset - self.max_delay + self.delays[: 1 + self.dep_q]) % columns
        return cache[np.arange(1 + self.dep_q), index].copy()

    def span_positions(self, token_ids: Sequence[int]) -> np.ndarray:
        """The K positions of a span chunk as codes [17, K]: text ids, -1 elsewhere."""
        codes = np.full((self.num_codebooks, len(token_ids)), ZERO_TOKEN, dtype=np.int64)
        codes[0] = np.asarray(token_ids, dtype=np.int64)
        return codes

    def inject_positions(self, token_ids: Sequence[int]) -> int:
        """A span chunk's positions in ONE forward. Returns K."""
        if not token_ids:
            return 0
        codes = self.span_positions(token_ids)
        out, _text_logits = self.lm.forward_text(mx.array(codes[None]), self.stream)
        mx.eval(out, *self.stream.arrays())
        return len(token_ids)
