"""The streaming ASR thread: the user's voice in, words and finished utterances out.

Frames of 1920 samples (80 ms at 24 kHz) come in through a bounded queue, like the duplex
engine's; app.asr.events go out through `events`. The turn ends by the STT's own
end-of-speech head when the checkpoint has one (it knows a finished sentence from a
pause), otherwise, or when forced, by Silero VAD after a silence hang time. At the end
of a turn the words still delayed inside the STT are flushed out before AsrFinal, so the
final text is complete without waiting for the model's audio delay.
"""

from __future__ import annotations

import logging
import queue
import threading
from dataclasses import dataclass, field

import numpy as np
import torch

from app.asr.events import AsrError, AsrEvent, AsrFinal, AsrPartial, AsrWord
from app.asr.kyutai_stt import KyutaiStreamingStt
from app.asr.stt_catalog import EndOfSpeechHeads, LoadedStt
from app.asr.vad import SileroTurnDetector, SpeechEnded, VadOptions
from app.frame_worker import END_OF_INPUT, FrameWorker

log = logging.getLogger(__name__)



@dataclass(frozen=True)
class AsrOptions:
    force_vad: bool = False  # end turns by VAD even when the STT has end-of-speech heads
    vad: VadOptions = field(default_factory=VadOptions)
    eos_threshold: float | None = None  # None: the manifest's (Kyutai's examples: 0.5)
    eos_hold_frames: int | None = None  # None: the manifest's
    flush_on_end_of_turn: bool = True
    input_queue_frames: int = 25  # 2 s of audio


class StreamingAsr(FrameWorker):
    def __init__(self, stt: LoadedStt, options: AsrOptions | None = None) -> None:
        self.options = options or AsrOptions()
        super().__init__(self.options.input_queue_frames, "streaming-asr")
        self.stt = stt
        use_stt = stt.end_of_speech is not None and not self.options.force_vad
        self.end_of_turn_by = "stt" if use_stt else "vad"
        self.events: queue.SimpleQueue[AsrEvent] = queue.SimpleQueue()
        self.ready = threading.Event()
        # Frames fully processed: their words, partials and finals are already in `events`.
        self.frames_done = 0
        self._progress = threading.Condition()
        self._ended = False
        self._words: list[AsrWord] = []  # the utterance so far
        self._above = 0  # consecutive frames with the end-of-speech head above threshold
        self._drops_seen = 0  # `dropped_frames` as of the last frame this thread took
        self._missed_in_turn = 0  # frames dropped since the previous turn ended

    # ---- any thread -------------------------------------------------------------------

    def finish_input(self, timeout: float | None = 10.0) -> None:
        """No more frames: the thread drains the queue, flushes the last words, and ends.

        The end of input is not an end of turn: an utterance still open gets its words,
        but no AsrFinal (pad a file with silence to have its last turn ended).
        """
        super().finish_input(timeout)

    def wait_frames(self, count: int, timeout: float) -> bool:
        """Block until `count` frames are processed, with every event they gave already in
        `events` (the replay feeder's barrier). False on timeout or if the thread ended."""
        with self._progress:
            return self._progress.wait_for(
                lambda: self.frames_done >= count or self._ended, timeout
            ) and self.frames_done >= count

    # ---- ASR thread -------------------------------------------------------------------

    def _run(self) -> None:
        stt: KyutaiStreamingStt | None = None
        try:
            with torch.no_grad():
                vad = None
                if self.end_of_turn_by == "vad":
                    vad = SileroTurnDetector(self.options.vad)
                stt = KyutaiStreamingStt(self.stt)
                stt.start()
                self.ready.set()
                self._loop(stt, vad)
        except Exception as exc:  # the thread must never die silently
            log.exception("streaming ASR failed")
            self.events.put(AsrError(f"{type(exc).__name__}: {exc}", fatal=True))
        finally:
            if stt is not None:
                stt.close()
            with self._progress:  # a waiter learns that no more frames will be counted
                self._ended = True
                self._progress.notify_all()

    def _loop(self, stt: KyutaiStreamingStt, vad: SileroTurnDetector | None) -> None:
        eos = self.stt.end_of_speech or EndOfSpeechHeads()
        opts = self.options
        threshold = eos.threshold if opts.eos_threshold is None else opts.eos_threshold
        hold = max(1, eos.hold_frames if opts.eos_hold_frames is None else opts.eos_hold_frames)
        while not self._stop.is_set():
            item = self._next_frame()
            if item is None:
                continue
            if item is END_OF_INPUT:
                self._add_words(stt.flush())
                return
            # The input queue holds objects: the frames, and END_OF_INPUT (handled above).
            pcm: np.ndarray = item  # type: ignore[assignment]
            # Drops happen on the feeding thread (a full queue): the turn being heard now
            # is the one that lost them.
            dropped = self.dropped_frames
            self._missed_in_turn += dropped - self._drops_seen
            self._drops_seen = dropped
            step = stt.step(pcm)
            self._add_words(step.words)
            if vad is not None:
                for event in vad.push(pcm):
                    if isinstance(event, SpeechEnded):
                        self._end_turn(stt, "vad", event.decided_at_s, event)
            elif step.end_of_speech_prob is not None and self._words:
                # Gated on words heard: the head also says "done" in silence before speech.
                above = step.end_of_speech_prob > threshold
                self._above = self._above + 1 if above else 0
                if self._above >= hold:
                    self._end_turn(stt, "stt", step.frame_end_s, None)
            with self._progress:  # counted once its events are out
                self.frames_done += 1
                self._progress.notify_all()

    def _add_words(self, words: tuple[AsrWord, ...]) -> None:
        for word in words:
            self._words.append(word)
            self.events.put(word)
            self.events.put(AsrPartial(self._text(), self._words[0].start_s, word.end_s))

    def _text(self) -> str:
        return " ".join(w.text for w in self._words)

    def _end_turn(
        self, stt: KyutaiStreamingStt, by: str, at_s: float, speech: SpeechEnded | None
    ) -> None:
        if self.options.flush_on_end_of_turn:
            self._add_words(stt.flush())
        if speech is not None:
            # The VAD measured where speech ended; flushed words can carry later stamps.
            start = min(self._words[0].start_s, speech.start_s) if self._words else (
                speech.start_s)
            end = speech.end_s
        elif self._words:
            start, end = self._words[0].start_s, self._words[-1].end_s
        else:
            return
        self.events.put(AsrFinal(self._text(), start, end, by, round(at_s, 4),
                                 missed_frames=self._missed_in_turn))
        self._missed_in_turn = 0
        self._words = []
        self._above = 0
