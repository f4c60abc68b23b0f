"""Turn untrusted span text into token ids: content inside exactly one wrapping.

Web pages and files may contain the wrapping markers themselves ("<system>") or text that
tokenizes to ids that steer the checkpoint (its <ret>, its span delimiters, control or
unknown pieces). None of it may reach the model as control. The guarantee is stated at the
level the model sees, the ids:

  after sanitising, no run of content ids spells a wrapping marker - in any case, with or
  without spaces inside it or before it, in whatever pieces the tokenizer cut it into - and
  no content id is a control, unknown, unused or checkpoint control id.

How: the text is NFKC-folded (full-width "＜" is "<") and control characters become spaces;
it is tokenized once; special ids become a space piece (dropping them would glue the pieces
around them back together); then one scan reads the ids' text character by character with
an Aho-Corasick automaton over the markers (spaces do not move it; case is folded). When a
marker completes, the ids it touches are removed and the scan resumes from the state before
them, so a marker that forms only once an inner one is gone ("<sys<system>tem>") is caught
too. Every character is pushed and popped at most once: linear time.
"""

from __future__ import annotations

import functools
import re
import sys
import unicodedata
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import sentencepiece

from app.checkpoints.catalog import SpanWrapping

NOT_ASCII = "\ufffd"  # a byte piece of a multi-byte character: never a marker character


@dataclass(frozen=True)
class SpanTokens:
    ids: tuple[int, ...]  # open wrapping + content + close wrapping
    content_ids: tuple[int, ...]
    original_content_tokens: int  # before truncation
    truncated: bool
    # Truncated: how many characters of the text the kept content covers (its start).
    read_chars: int | None = None


class MarkerAutomaton:
    """Aho-Corasick over the markers' non-space characters, lower-cased."""

    def __init__(self, markers: Iterable[str]) -> None:
        self.goto: list[dict[str, int]] = [{}]
        self.fail: list[int] = [0]
        self.length: list[int] = [0]  # marker length (non-space chars) ending here, 0: none
        for marker in markers:
            chars = [c.lower() for c in marker if not c.isspace()]
            if not chars:
                continue
            state = 0
            for c in chars:
                nxt = self.goto[state].get(c)
                if nxt is None:
                    nxt = len(self.goto)
                    self.goto[state][c] = nxt
                    self.goto.append({})
                    self.fail.append(0)
                    self.length.append(0)
                state = nxt
            self.length[state] = max(self.length[state], len(chars))
        queue: deque[int] = deque(self.goto[0].values())
        while queue:
            state = queue.popleft()
            for c, nxt in self.goto[state].items():
                queue.append(nxt)
                f = self.fail[state]
                while f and c not in self.goto[f]:
                    f = self.fail[f]
                target = self.goto[f].get(c, 0)
                self.fail[nxt] = target if target != nxt else 0
                if not self.length[nxt]:
                    self.length[nxt] = self.length[self.fail[nxt]]
        self.alphabet = frozenset(c for edges in self.goto for c in edges)

    def step(self, state: int, c: str) -> int:
        while state and c not in self.goto[state]:
            state = self.fail[state]
        return self.goto[state].get(c, 0)


def scrub(units: Sequence[str], automaton: MarkerAutomaton) -> list[bool]:
    """Which units to remove so that the text of the rest spells no marker.

    `units` are the lower-cased text of consecutive pieces (one character each for plain
    text, the decoded piece for ids). Returns a keep-flag per unit. Linear in the total
    characters: each is pushed and popped at most once, and a character after which no
    marker is under way empties the stack (nothing before it can be part of one)."""
    keep = [True] * len(units)
    if not automaton.alphabet:
        return keep
    starts = frozenset(automaton.goto[0])
    goto, fail, lengths = automaton.goto, automaton.fail, automaton.length
    # One entry per character of a marker under way: its state after, its unit, whether it
    # is a marker character (True) or a space inside the marker (False).
    stack_state: list[int] = []
    stack_unit: list[int] = []
    stack_counts: list[bool] = []
    state = 0
    for index, text in enumerate(units):
        for c in text:
            if c.isspace():
                if state:
                    stack_state.append(state)
                    stack_unit.append(index)
                    stack_counts.append(False)
                continue
            if not state and c not in starts:
                continue
            while state and c not in goto[state]:
                state = fail[state]
            state = goto[state].get(c, 0)
            if not state:
                stack_state.clear()
                stack_unit.clear()
                stack_counts.clear()
                continue
            stack_state.append(state)
            stack_unit.append(index)
            stack_counts.append(True)
            length = lengths[state]
            if not length:
                continue
            # A marker ends here: find the unit where its first character is.
            need, position = length, len(stack_state)
            while need:
                position -= 1
                need -= stack_counts[position]
            first_unit = stack_unit[position]
            # Take out every unit the marker touches (each is on the stack: popping marks
            # it, so units taken out before are not visited again).
            while stack_unit and stack_unit[-1] >= first_unit:
                keep[stack_unit.pop()] = False
                stack_state.pop()
                stack_counts.pop()
            state = stack_state[-1] if stack_state else 0
            break  # the rest of this unit went with it
    return keep


@functools.lru_cache(maxsize=1)
def control_pattern() -> re.Pattern[str]:
    """Control, format, surrogate and private-use characters (Unicode category C, but not
    the unassigned: those tokenize as unknown or byte pieces and are handled as ids)."""
    ranges: list[list[int]] = []
    for code in range(sys.maxunicode + 1):
        if unicodedata.category(chr(code)) in ("Cc", "Cf", "Cs", "Co"):
            if ranges and ranges[-1][1] == code - 1:
                ranges[-1][1] = code
            else:
                ranges.append([code, code])
    parts = "".join(f"\\U{a:08x}" if a == b else f"\\U{a:08x}-\\U{b:08x}" for a, b in ranges)
    return re.compile(f"[{parts}]+")


# The shortest span limit the frame budget may set (positions, the wrapping included):
# about one spoken sentence of 40 words, the router's longest answer.
MIN_SPAN_POSITIONS = 64


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
        markers = [] if by_id else [m for m in (wrapping.open, wrapping.close) if m.strip()]
        self._automaton = MarkerAutomaton(markers)
        if not by_id and any(self._is_special(i) for i in self.open_ids + self.close_ids):
            raise ValueError(
                f"the tokenizer cannot spell the span wrapping {wrapping.open!r}/"
                f"{wrapping.close!r} without special or unknown ids"
            )
        if max_tokens <= len(self.open_ids) + len(self.close_ids):
            raise ValueError("max_tokens leaves no room for content inside the wrapping")
        spaces = [i for i in tokenizer.encode(" a") if not self._is_special(i)]
        # The piece that stands for a space where something was taken out.
        self._space_id = tokenizer.piece_to_id("\u2581")
        if self._is_special(self._space_id) and spaces:
            self._space_id = spaces[0]
        self._piece_text = self._piece_texts()
        self._special = [self._is_special(i) for i in range(tokenizer.get_piece_size())]

    def _piece_texts(self) -> list[str]:
        """Each id's text as it reads in the model's stream (byte pieces: their ASCII byte,
        or a placeholder for bytes of multi-byte characters)."""
        sp = self._sp
        texts = []
        for i in range(sp.get_piece_size()):
            if sp.is_byte(i):
                value = int(sp.id_to_piece(i)[3:5], 16)
                texts.append(chr(value).lower() if value < 0x80 else NOT_ASCII)
            else:
                texts.append(sp.id_to_piece(i).replace("\u2581", " ").lower())
        return texts

    def sanitize(self, text: str) -> str:
        """The text as the scan reads it: NFKC-folded, control characters as spaces, and
        the markers taken out (their ids are taken out again after tokenizing)."""
        text = control_pattern().sub(" ", unicodedata.normalize("NFKC", text))
        keep = scrub(text.lower(), self._automaton)
        if not all(keep):
            text = "".join(c if kept else " " for c, kept in zip(text, keep, strict=True))
        return " ".join(text.split())

    def _is_special(self, token_id: int) -> bool:
        sp = self._sp
        return bool(token_id in self.control_ids or sp.is_control(token_id)
                    or sp.is_unknown(token_id) or sp.is_unused(token_id))

    def content(self, text: str) -> list[int]:
        """The content ids of `text`, under the guarantee of the module docstring."""
        special, space = self._special, self._space_id
        ids = [space if special[i] else i for i in self._sp.encode(self.sanitize(text))]
        keep = scrub([self._piece_text[i] for i in ids], self._automaton)
        out: list[int] = []
        for token, kept in zip(ids, keep, strict=True):
            if kept:
                out.append(token)
            elif out and out[-1] != self._space_id:
                out.append(self._space_id)  # keep the words around a removal apart
        while out and out[-1] == self._space_id:
            out.pop()
        return out

    def fit_to_budget(self, fits: int, cap: int) -> None:
        """A block is never split, so the longest span is the longest block whose forward
        plus one frame fit the frame budget measured on this device (`fits` positions),
        within `cap` (the manifest's maximum). Never below MIN_SPAN_POSITIONS (one spoken
        sentence): a device that cannot fit that much is over the frame anyway, and its
        blocks are reported so (BlockSlot), as the reference reports them. Spans tokenized
        from now on are cut there."""
        floor = max(MIN_SPAN_POSITIONS, len(self.open_ids) + len(self.close_ids) + 1)
        self.max_tokens = min(cap, max(floor, fits))

    @property
    def content_budget(self) -> int:
        """The most content tokens one span carries, its delimiters apart."""
        return self.max_tokens - len(self.open_ids) - len(self.close_ids)

    def encode(self, text: str) -> SpanTokens:
        return self.cut(text, self.content(text))

    def cut(self, text: str, ids: Sequence[int]) -> SpanTokens:
        """The span of `text`, whose content ids are `ids` (`content(text)`), inside its
        wrapping and cut to the budget as it is now. The engine tokenizes a span when it is
        offered and cuts it when it goes in, so a span offered before the budget was
        measured is cut to the measured budget, not to the manifest's cap."""
        budget = self.content_budget
        original = len(ids)
        content = list(ids[:budget])
        truncated = original > budget
        return SpanTokens(
            ids=self.open_ids + tuple(content) + self.close_ids,
            content_ids=tuple(content),
            original_content_tokens=original,
            truncated=truncated,
            read_chars=self.chars_covered(text, content) if truncated else None,
        )

    def chars_covered(self, text: str, content: Sequence[int]) -> int:
        """How many characters at the start of `text` the ids `content` (its first content
        ids) spell, about: tokenizing folds compatibility forms (NFKC) and collapses spaces,
        so the count goes by the characters that are not spaces, which both sides share."""
        read = self._sp.decode(list(content))
        wanted = sum(1 for c in unicodedata.normalize("NFKC", read) if not c.isspace())
        seen = 0
        for index, c in enumerate(text):
            if seen >= wanted:
                return index
            if not c.isspace():
                seen += len(unicodedata.normalize("NFKC", c))
        return len(text)
