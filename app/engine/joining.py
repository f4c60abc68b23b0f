"""How a conversation joins a many-row engine without costing the others a frame.

A persona checkpoint's conversation starts with forced frames (conversation_start.py): a
voice prompt, a persona, silences; hundreds of positions, and a cloned voice is a recording
Mimi must encode first. Run in one go at a frame boundary, that start stopped every other
conversation on the engine: 0.86-1.81 s with a cloned 30 s voice on a CPU, 5.7 s of silence
for a long conversation while three clones joined (issue 33). So a start is split in two:

1. its plan (the voice recording encoded, the persona tokenized) is made off the engine's
   thread, by `StartPlanner`, with a Mimi of its own (the engine's streams every row);
2. its reads (a saved voice's embeddings, then the forced frames' input columns, whose
   bookkeeping is done at once on the host) go in as `StartReads`, at most one piece a
   tick, of at most the chunk that fits beside a frame (the warm-up's budget), after the
   tick's frames: chunked prefill, exact like a span's (the rings hold the longest read).

With no other conversation live, nobody waits: the whole start goes in at once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

import numpy as np
import numpy.typing as npt

from app.engine.conversation_start import StartPlan
from app.moshi_internals import unstreamed_copy

if TYPE_CHECKING:
    import torch
    from moshi.models import MimiModel

    from app.engine.lm_runtime import LmRuntime
    from app.engine.speech_engine import EngineOptions


@dataclass(frozen=True)
class PlannedStart:
    """A conversation's start, planned off the engine's thread (or why it could not be)."""

    plan: StartPlan | None
    error: Exception | None = None


class Joiner(Protocol):
    """What joining asks of a conversation (row_conversation.RowConversation)."""

    row: int
    options: EngineOptions
    planned: PlannedStart | None


Conversation = TypeVar("Conversation", bound=Joiner)


class StartPlanner:
    def __init__(self, mimi: MimiModel, plan: Callable[[Any, MimiModel], StartPlan | None]
                 ) -> None:
        """`plan(conversation, mimi)`: its start, with `mimi` (this planner's own copy of
        the checkpoint's, not streaming) to encode a voice recording."""
        self._mimi = unstreamed_copy(mimi)
        self._plan = plan
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="conversation-starts")
        self._lock = threading.Lock()
        self._closed = False

    def submit(self, conversation: Conversation, then: Callable[[Conversation], None]) -> None:
        """Plan the conversation's start, keep it on the conversation (`planned`), then
        call `then(conversation)` (it asks to join), whatever the outcome."""
        def job() -> None:
            try:
                conversation.planned = PlannedStart(self._plan(conversation, self._mimi))
            except Exception as exc:  # its start fails when it joins: it alone ends
                conversation.planned = PlannedStart(None, exc)
            then(conversation)

        with self._lock:
            if self._closed:
                then(conversation)  # the engine stopped: the join ends it
                return
            self._pool.submit(job)

    def close(self) -> None:
        with self._lock:
            self._closed = True
        self._pool.shutdown(wait=False, cancel_futures=True)


class StartReads(Generic[Conversation]):
    """What of a conversation's start is still to be read, for its row."""

    def __init__(self, conversation: Conversation, prompt_frames: int,
                 embeddings: torch.Tensor | None, columns: npt.NDArray[np.int64]) -> None:
        """`embeddings` [N, ..., dim]: a saved voice's, replayed first; `columns` [17, M]:
        the forced frames' input columns, their bookkeeping already done."""
        self.conversation = conversation
        self.prompt_frames = prompt_frames
        self._embeddings = embeddings
        self._columns = columns
        self._done = 0  # positions read so far, embeddings first
        self.pieces = 0  # reads run (tests: a start in pieces)

    @property
    def total(self) -> int:
        voice = 0 if self._embeddings is None else int(self._embeddings.shape[0])
        return voice + int(self._columns.shape[1])

    @property
    def finished(self) -> bool:
        return self._done >= self.total

    def read_next(self, runtime: LmRuntime, limit: int) -> int:
        """Read at most `limit` more positions (one forward, two where the saved voice
        ends); returns the positions read."""
        row = self.conversation.row
        count = min(self.total - self._done, max(1, limit))
        voice = 0 if self._embeddings is None else int(self._embeddings.shape[0])
        read = 0
        if self._done < voice:  # the saved voice first
            assert self._embeddings is not None
            piece = min(count, voice - self._done)
            runtime.replay_embeddings(row, self._embeddings[self._done : self._done + piece])
            self._done += piece
            read += piece
            self.pieces += 1
        if read < count:
            start = self._done - voice
            piece = count - read
            runtime.read(row, self._columns[:, start : start + piece])
            self._done += piece
            read += piece
            self.pieces += 1
        return read
