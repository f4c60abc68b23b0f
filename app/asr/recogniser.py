"""The speech recogniser for one conversation or many: ONE model, ONE batched step a frame.

One thread owns the STT (kyutai_stt.SttRows at B rows): a row host (app/row_host.py, the
speech engine's too). Each tick it takes one frame from every conversation that has one,
steps all of them at once, and hands each its token; what a conversation's turn then needs
for itself alone (the silence prefix when it joins, the flush at the end of its turn) runs
for its row alone. A conversation (asr_thread.StreamingAsr) holds its row from `open` to its
end; the desktop's and `run`'s has a one-row recogniser of its own, `serve --slots N --asr
...` one recogniser of N rows for all its conversations, not N models. Recognisers made one
after another on one loaded model (eval fdb3's samples) take turns: the model's modules keep
one stream's state, so a new one waits for the last to have let them go.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

import numpy as np

from app.asr.events import AsrError
from app.asr.kyutai_stt import SttRows
from app.asr.stt_catalog import LoadedStt
from app.row_host import RowHost

if TYPE_CHECKING:
    from app.asr.asr_thread import AsrOptions, StreamingAsr

log = logging.getLogger(__name__)

# A tick of the recogniser that takes longer is its failure (a hung step).
STALL_S = 15.0


class Recogniser(RowHost["StreamingAsr"]):
    what = "the speech recogniser"

    def __init__(self, stt: LoadedStt, rows: int = 1, gather_ms: float = 20.0,
                 stall_s: float = STALL_S) -> None:
        super().__init__("speech-recognition", rows, gather_ms, stall_s)
        self.stt = stt
        self.model = SttRows(stt, rows)

    def open(self, options: AsrOptions | None = None, owns: bool = False
             ) -> StreamingAsr | None:
        """A conversation's recognition on a free row, or None when every row is held."""
        from app.asr.asr_thread import StreamingAsr

        return self._hold(lambda row: StreamingAsr(self.stt, options, recogniser=self,
                                                   row=row, owns=owns))

    # ---- the recogniser's thread ------------------------------------------------------------

    @contextmanager
    def _serving(self) -> Iterator[None]:
        with self._model_to_itself(self.stt.streaming), self.model.streaming():
            yield

    def _error_event(self, message: str) -> AsrError:
        return AsrError(message, fatal=True)

    def _admit(self, asr: StreamingAsr) -> None:
        asr.join_row()  # its row reset, its silence prefix (its row alone)
        self._go_live(asr)

    def _end_of_input(self, asr: StreamingAsr) -> None:
        asr.end_of_input()

    def _step(self, items: Sequence[tuple[StreamingAsr, object]]) -> None:
        frames = [(asr, pcm) for asr, pcm in items if isinstance(pcm, np.ndarray)]
        if not frames:
            return
        rows = [asr.row for asr, _pcm in frames]
        try:
            tokens, probs = self.model.step(rows, np.stack([pcm for _asr, pcm in frames]))
        except Exception as exc:  # the batched step itself: every conversation in it
            for asr, _pcm in frames:
                self._fail(asr, exc)
            return
        self.ticks += 1
        for (asr, pcm), token, prob in zip(frames, tokens, probs, strict=True):
            try:
                asr.heard(pcm, token, prob)
            except Exception as exc:  # its turn (a flush on its row): it alone ends
                self._fail(asr, exc)
