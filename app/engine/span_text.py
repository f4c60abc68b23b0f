"""Turn untrusted span text into token ids: content inside exactly one wrapping.

Web pages and files may contain the wrapping markers themselves or text that tokenizes to
special ids. Neither may reach the model as control: markers are removed from the content
(until none is left, so nested tricks like "<sys<system>tem>" fail too), and ids that are
control or unknown pieces (Moshi reads 0 and 3 as padding) are dropped after tokenizing.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

import sentencepiece

from app.checkpoints.catalog import SpanWrapping


@dataclass(frozen=True)
class SpanTokens:
    ids: tuple[int, ...]  # open wrapping + content + close wrapping
    content_ids: tuple[int, ...]
    original_content_tokens: int  # before truncation
    truncated: bool


def _marker_pattern(marker: str) -> re.Pattern[str]:
    # Also match the marker with spaces sprinkled inside it ("< system >"), any case.
    chars = [re.escape(c) for c in marker if not c.isspace()]
    return re.compile(r"\s*".join(chars), re.IGNORECASE)


class SpanTokenizer:
    def __init__(
        self,
        tokenizer: sentencepiece.SentencePieceProcessor,
        wrapping: SpanWrapping,
        max_tokens: int,
        control_ids: frozenset[int] = frozenset(),
    ) -> None:
        """`control_ids`: ids that mean something to the checkpoint (its <ret> and span
        delimiters); content never carries them, whatever the text."""
        self._sp = tokenizer
        self.wrapping = wrapping
        self.max_tokens = max_tokens
        by_id = bool(wrapping.open_ids or wrapping.close_ids)
        if by_id:  # delimiters the checkpoint was trained on as ids (byte pieces)
            self.open_ids = tuple(wrapping.open_ids)
            self.close_ids = tuple(wrapping.close_ids)
        else:
            self.open_ids = tuple(tokenizer.encode(wrapping.open)) if wrapping.open else ()
            self.close_ids = tuple(tokenizer.encode(wrapping.close)) if wrapping.close else ()
        self.control_ids = frozenset(control_ids) | (
            frozenset(self.open_ids + self.close_ids) if by_id else frozenset())
        markers = {m for m in (wrapping.open, wrapping.close) if m.strip()} if not by_id else set()
        self._patterns = [_marker_pattern(m) for m in markers]
        self._forbidden_sequences = [s for s in (self.open_ids, self.close_ids) if s]
        if not by_id and any(self._is_special(i) for i in self.open_ids + self.close_ids):
            raise ValueError(
                f"the tokenizer cannot spell the span wrapping {wrapping.open!r}/"
                f"{wrapping.close!r} without special or unknown ids"
            )
        if max_tokens <= len(self.open_ids) + len(self.close_ids):
            raise ValueError("max_tokens leaves no room for content inside the wrapping")

    def sanitize(self, text: str) -> str:
        text = unicodedata.normalize("NFKC", text)  # fold look-alikes such as fullwidth '＜'
        text = "".join(" " if unicodedata.category(c)[0] == "C" else c for c in text)
        previous = None
        while previous != text:
            previous = text
            for pattern in self._patterns:
                text = pattern.sub(" ", text)
        return " ".join(text.split())

    def _is_special(self, token_id: int) -> bool:
        sp = self._sp
        return bool(token_id in self.control_ids or sp.is_control(token_id)
                    or sp.is_unknown(token_id) or sp.is_unused(token_id))

    def _strip_forbidden(self, ids: list[int]) -> list[int]:
        changed = True
        while changed:
            changed = False
            for seq in self._forbidden_sequences:
                n = len(seq)
                for i in range(len(ids) - n + 1):
                    if tuple(ids[i : i + n]) == seq:
                        del ids[i : i + n]
                        changed = True
                        break
        return ids

    def encode(self, text: str) -> SpanTokens:
        clean = self.sanitize(text)
        ids = [i for i in self._sp.encode(clean) if not self._is_special(i)]
        ids = self._strip_forbidden(ids)
        budget = self.max_tokens - len(self.open_ids) - len(self.close_ids)
        original = len(ids)
        content = ids[:budget]
        return SpanTokens(
            ids=self.open_ids + tuple(content) + self.close_ids,
            content_ids=tuple(content),
            original_content_tokens=original,
            truncated=original > budget,
        )

    def piece_text(self, token_id: int) -> str:
        return self._sp.id_to_piece(token_id).replace("▁", " ")
