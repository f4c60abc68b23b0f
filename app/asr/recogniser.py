"""The speech recogniser for one conversation or many: ONE model, ONE batched step a frame.

One thread owns the STT (kyutai_stt.SttRows at B rows). Each tick it takes one frame from
every conversation that has one (frame_gather.py, as the speech engine does), steps all of
them at once, and hands each its token; what a conversation's turn then needs for itself
alone (the silence prefix when it joins, the flush at the end of its turn) runs for its row
alone. A conversation (asr_thread.StreamingAsr) holds its row from `open` to its end; the
desktop's and `run`'s has a one-row recogniser of its own, `serve --slots N --asr ...` one
recogniser of N rows for all its conversations, not N models. Recognisers made one after
another on one loaded model (eval fdb3's samples) take turns: the model's modules keep one
stream's state, so a new one waits for the last to have let them go.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import numpy as np

from app.asr.events import AsrError
from app.asr.kyutai_stt import SttRows
from app.asr.stt_catalog import LoadedStt
from app.frame_gather import FrameGather
from app.frame_worker import END_OF_INPUT
from app.thread_owner import ThreadOwner

if TYPE_CHECKING:
    from app.asr.asr_thread import AsrOptions, StreamingAsr

log = logging.getLogger(__name__)

MODEL_BUSY_WAIT_S = 60.0  # for the last conversation's recogniser to let the model go


class Recogniser(ThreadOwner):
    def __init__(self, stt: LoadedStt, rows: int = 1, gather_ms: float = 20.0) -> None:
        super().__init__("speech-recognition")
        self.stt = stt
        self.row_count = rows
        self.model = SttRows(stt, rows)
        self._rows: list[StreamingAsr | None] = [None] * rows
        self._lock = threading.Lock()
        self._joining: queue.SimpleQueue[StreamingAsr] = queue.SimpleQueue()
        self._live: list[StreamingAsr] = []
        self._wake_up = threading.Event()
        self._gather = FrameGather(self._wake_up, gather_ms / 1000.0)
        self.ready = threading.Event()  # streaming: conversations join from now on
        self.ticks = 0  # batched steps run (tests and benchmarks)

    # ---- any thread -----------------------------------------------------------------------

    @property
    def free_rows(self) -> int:
        with self._lock:
            return sum(holder is None for holder in self._rows)

    def open(self, options: AsrOptions | None = None, owns: bool = False
             ) -> StreamingAsr | None:
        """A conversation's recognition on a free row, or None when every row is held."""
        from app.asr.asr_thread import StreamingAsr

        if self.stopped:
            raise RuntimeError("the speech recogniser has stopped")
        with self._lock:
            row = next((r for r, holder in enumerate(self._rows) if holder is None), None)
            if row is None:
                return None
            asr = StreamingAsr(self.stt, options, recogniser=self, row=row, owns=owns)
            self._rows[row] = asr
        return asr

    def hold(self, row: int, asr: StreamingAsr) -> None:
        """`asr` takes the free row `row` (a conversation with a recogniser of its own)."""
        with self._lock:
            if self._rows[row] is not None:
                raise RuntimeError(f"row {row} of the recogniser is held")
            self._rows[row] = asr

    @property
    def stopped(self) -> bool:
        return self._stop.is_set() or (self._thread is not None and not self._thread.is_alive())

    def request_join(self, asr: StreamingAsr) -> None:
        self._joining.put(asr)
        self.wake()

    def request_leave(self, asr: StreamingAsr) -> None:
        if not asr.started:
            self._free(asr)
        self.wake()

    def wake(self) -> None:
        self._wake_up.set()

    def _wake(self) -> None:
        self.wake()

    # ---- the recogniser's thread ------------------------------------------------------------

    def _run(self) -> None:
        try:
            with self._model_to_itself(), self.model.streaming():
                self.ready.set()
                while not self._stop.is_set():
                    self._tick()
        except Exception as exc:  # the thread must never die silently
            log.exception("speech recognition failed")
            for asr in self._held():
                asr.emit(AsrError(f"{type(exc).__name__}: {exc}", fatal=True))
        finally:
            self._stop.set()
            for asr in self._held():
                self._free(asr)

    @contextmanager
    def _model_to_itself(self) -> Iterator[None]:
        """The loaded model's modules hold one stream's state: a recogniser that still
        streams them (the last conversation's, winding down) is waited for, bounded."""
        if not self.stt.streaming.acquire(timeout=MODEL_BUSY_WAIT_S):
            raise RuntimeError(f"its model was still in use by another conversation after "
                               f"{MODEL_BUSY_WAIT_S:g} s")
        try:
            yield
        finally:
            self.stt.streaming.release()

    def _held(self) -> list[StreamingAsr]:
        with self._lock:
            return [holder for holder in self._rows if holder is not None]

    def _free(self, asr: StreamingAsr) -> None:
        with self._lock:
            if self._rows[asr.row] is not asr:
                return
            self._rows[asr.row] = None
        if asr in self._live:
            self._live.remove(asr)
        self._gather.forget(asr.row)
        asr.ended()
        if asr.owns_host:
            self._stop.set()

    def _fail(self, asr: StreamingAsr, exc: Exception) -> None:
        log.exception("speech recognition failed on row %d", asr.row)
        asr.emit(AsrError(f"{type(exc).__name__}: {exc}", fatal=True))
        self._free(asr)

    def _boundary(self) -> None:
        for asr in list(self._live):
            if asr.leaving:
                self._free(asr)
        while True:
            try:
                asr = self._joining.get_nowait()
            except queue.Empty:
                return
            if asr.leaving:
                self._free(asr)
                continue
            try:
                asr.join_row()  # its row reset, its silence prefix (its row alone)
            except Exception as exc:
                self._fail(asr, exc)
                continue
            self._live.append(asr)
            self._gather.joined(asr.row)

    def _tick(self) -> None:
        self._boundary()
        frames: list[tuple[StreamingAsr, np.ndarray]] = []
        for asr, item in self._gather.next_tick(self._live, self._joining, self._stop):
            if item is END_OF_INPUT:
                try:
                    asr.end_of_input()
                except Exception as exc:
                    self._fail(asr, exc)
                    continue
                self._free(asr)
            else:
                assert isinstance(item, np.ndarray)
                frames.append((asr, item))
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
