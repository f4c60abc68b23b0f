"""One conversation's speech recognition: the user's voice in, words and finished utterances
out, on a row of a recogniser (recogniser.py: one model, one batched step for every
conversation that has a frame).

Frames of 1920 samples (80 ms at 24 kHz) come in through a bounded queue, like the speech
engine's; app.asr.events go out to its sink (`send_events_to`; else its own queue,
`events`). The turn ends by the STT's own end-of-speech head when the checkpoint has one
(it knows a finished sentence from a pause), otherwise, or when forced, by Silero VAD after
a silence hang time. At the end of a turn the words still delayed inside the STT are
flushed out (its row alone) before AsrFinal, so the final text is complete without waiting
for the model's audio delay. With the VAD on, each partial says whether it heard the user
speak in the utterance (`voiced`): a recogniser makes words of silence and noise too, and
those must not pass for the user.

`StreamingAsr(stt, options)` is a conversation with a one-row recogniser of its own (the
desktop, `run`); `Recogniser.open` gives one on a shared recogniser (`serve --slots`).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from app.asr.events import AsrEvent, AsrFinal, AsrPartial, AsrWord
from app.asr.kyutai_stt import KyutaiStreamingStt
from app.asr.stt_catalog import EndOfSpeechHeads, LoadedStt
from app.asr.vad import SileroTurnDetector, SpeechEnded, SpeechStarted, VadOptions
from app.frame_row import FrameRow

if TYPE_CHECKING:
    from app.asr.recogniser import Recogniser

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AsrOptions:
    force_vad: bool = False  # end turns by VAD even when the STT has end-of-speech heads
    vad: VadOptions = field(default_factory=VadOptions)
    eos_threshold: float | None = None  # None: the manifest's (Kyutai's examples: 0.5)
    eos_hold_frames: int | None = None  # None: the manifest's
    flush_on_end_of_turn: bool = True
    input_queue_frames: int = 25  # 2 s of audio


class StreamingAsr(FrameRow[AsrEvent]):
    runs_once = "a conversation's recognition runs once; open a new one"

    def __init__(self, stt: LoadedStt, options: AsrOptions | None = None, *,
                 recogniser: Recogniser | None = None, row: int = 0, owns: bool = False
                 ) -> None:
        """Without `recogniser`: a one-row recogniser of its own, started with this
        conversation and stopped with it. With one: its row `row` (Recogniser.open)."""
        self.options = options or AsrOptions()
        self.stt = stt
        if recogniser is None:
            from app.asr.recogniser import Recogniser

            recogniser = Recogniser(stt, 1)
            owns = True
            recogniser.hold(0, self)
        super().__init__(recogniser, row, self.options.input_queue_frames, owns)
        # `ready`: its row joined, frames are recognised.
        self._recogniser = recogniser
        use_stt = stt.end_of_speech is not None and not self.options.force_vad
        self.end_of_turn_by = "stt" if use_stt else "vad"
        # Frames fully processed: their words, partials and finals are already out.
        self.frames_done = 0
        self._progress = threading.Condition()
        self._stream: KyutaiStreamingStt | None = None
        self._vad: SileroTurnDetector | None = None
        self._words: list[AsrWord] = []  # the utterance so far
        self._above = 0  # consecutive frames with the end-of-speech head above threshold
        self._drops_seen = 0  # `dropped_frames` as of the last frame the recogniser took
        self._missed_in_turn = 0  # frames dropped since the previous turn ended
        # The VAD heard speech in the utterance so far (its partials say so: `voiced`).
        self._voiced = False

    # ---- any thread -------------------------------------------------------------------

    def wait_frames(self, count: int, timeout: float) -> bool:
        """Block until `count` frames are processed, with every event they gave already
        out (the replay feeder's barrier). False on timeout or if it ended."""
        with self._progress:
            return self._progress.wait_for(
                lambda: self.frames_done >= count or self._ended.is_set(), timeout
            ) and self.frames_done >= count

    # ---- the recogniser's thread ----------------------------------------------------------

    def ended(self) -> None:
        if self._stream is not None:
            self._stream.close()
        with self._progress:  # a waiter learns that no more frames will be counted
            super().ended()
            self._progress.notify_all()

    def join_row(self) -> None:
        """Its row starts: the stream reset, the model's silence prefix (its row alone)."""
        if self.end_of_turn_by == "vad":
            self._vad = SileroTurnDetector(self.options.vad)
        self._stream = KyutaiStreamingStt(self.stt, self._recogniser.model, self.row)
        self._stream.start()

    def end_of_input(self) -> None:
        assert self._stream is not None
        self._add_words(self._stream.flush())

    def heard(self, pcm: np.ndarray, text_id: int, end_of_speech_prob: float | None) -> None:
        """The model's token for the row's frame `pcm`: words, and maybe the turn's end."""
        stream = self._stream
        assert stream is not None
        eos = self.stt.end_of_speech or EndOfSpeechHeads()
        opts = self.options
        threshold = eos.threshold if opts.eos_threshold is None else opts.eos_threshold
        hold = max(1, eos.hold_frames if opts.eos_hold_frames is None else opts.eos_hold_frames)
        # Drops happen on the feeding thread (a full queue): the turn being heard now is
        # the one that lost them.
        dropped = self.dropped_frames
        self._missed_in_turn += dropped - self._drops_seen
        self._drops_seen = dropped
        step = stream.take(text_id, end_of_speech_prob)
        heard = self._vad.push(pcm) if self._vad is not None else []
        if any(isinstance(event, SpeechStarted) for event in heard):
            self._voiced = True  # before this frame's words: they are the speech's
        self._add_words(step.words)
        if self._vad is not None:
            for event in heard:
                if isinstance(event, SpeechEnded):
                    self._end_turn(stream, event.decided_at_s, event)
        elif step.end_of_speech_prob is not None and self._words:
            # Gated on words heard: the head also says "done" in silence before speech.
            above = step.end_of_speech_prob > threshold
            self._above = self._above + 1 if above else 0
            if self._above >= hold:
                self._end_turn(stream, step.frame_end_s, None)
        with self._progress:  # counted once its events are out
            self.frames_done += 1
            self._progress.notify_all()

    def _add_words(self, words: tuple[AsrWord, ...]) -> None:
        voiced = self._voiced if self._vad is not None else None
        for word in words:
            self._words.append(word)
            self.emit(word)
            self.emit(AsrPartial(self._text(), self._words[0].start_s, word.end_s,
                                       voiced))

    def _text(self) -> str:
        return " ".join(w.text for w in self._words)

    def _end_turn(self, stream: KyutaiStreamingStt, at_s: float,
                  speech: SpeechEnded | None) -> None:
        if self.options.flush_on_end_of_turn:
            self._add_words(stream.flush())
        if speech is not None:
            # The VAD measured where speech ended; flushed words can carry later stamps.
            start = min(self._words[0].start_s, speech.start_s) if self._words else (
                speech.start_s)
            end = speech.end_s
        elif self._words:
            start, end = self._words[0].start_s, self._words[-1].end_s
        else:
            return
        self.emit(AsrFinal(self._text(), start, end, self.end_of_turn_by,
                                 round(at_s, 4), missed_frames=self._missed_in_turn,
                                 words=tuple(self._words)))
        self._missed_in_turn = 0
        self._words = []
        self._above = 0
        self._voiced = False
