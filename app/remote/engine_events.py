"""The server's wire events as the engine's own events (the reverse of the server's
event_mapping.py), so the session, the transcript and the orchestrator see a remote
conversation exactly as a local one.

Two things differ from a local engine and are translated here:
- Frame numbers: the server counts frames per conversation, and a reconnect starts a new
  one. The app counts the audio frames it received, across connections, so the
  orchestrator's clock never goes back; a server frame is moved onto that count.
- Span ids: the orchestrator needs its span's id when it injects, before the server has
  seen the span. The app gives its own id, sends it as the span's `id`, and the server's
  `span_queued` echoes it beside the server's id.

With the server's recognition (`asr`), its `user_text` events are the recogniser's own
events (app/asr/events.py), on the app's clock, so the orchestrator's questions, turn ends
and <ret> windows see what a local recogniser would give them: each partial grows the
utterance by the words the recogniser just heard (a local one says each as an AsrWord,
ending when the partial does), and the final ends the turn ("detected by the server").
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from app.asr.events import AsrError, AsrEvent, AsrFinal, AsrPartial, AsrWord
from app.cuts import Cut
from app.engine import events as ev
from app.engine.context_ledger import ContextLedger
from app.frames import FRAME_RATE, FRAME_S
from app.wire import events as wire

END_OF_TURN_BY_SERVER = "server"  # AsrFinal.detected_by for the speech server's recogniser
# Frames of a conversation with the server's recognition chosen and not one `user_text`
# from it: then a notice says the server may run without recognition (30 s).
QUIET_RECOGNITION_FRAMES = 375

# What the server's messages become here: the engine's events and, with its recognition,
# the recogniser's.
Mapped = ev.EngineEvent | AsrEvent


@dataclass(frozen=True)
class SentSpan:
    text: str
    source: str
    origin_frame: int | None  # the <ret> it answers, on the app's frame count
    cuts: tuple[Cut, ...] = ()  # what the app cut before sending it (the wire's bound)


class EngineEventMapper:
    """One per remote engine; `new_conversation` at each `ready` (a reconnect included).

    Called from the network thread only, except `sent`, which the orchestrator's thread
    calls when it injects (hence the lock)."""

    def __init__(self, asr: bool = False) -> None:
        """`asr`: the server recognises the user's words (its `user_text` is mapped)."""
        self.asr = asr
        # Each utterance the server is recognising (its first frame): the words so far, and
        # when the last of them ended (seconds on the app's clock).
        self._utterances: dict[int, tuple[list[str], float]] = {}
        self._heard_user = False  # a `user_text` came in this conversation
        self._quiet_said = False
        self._lock = threading.Lock()
        self._sent: dict[int, SentSpan] = {}  # the app's span id -> what was sent
        self._by_server: dict[int, int] = {}  # the server's span id -> the app's
        self.frames = 0  # audio frames received, all conversations
        self._base = 0  # `frames` when the current conversation began
        self.context_window = 0
        # This conversation's positions as the server's model holds them: its frames and
        # the spans it said landed, which slide out of the window as a local engine's do.
        self._ledger = ContextLedger(0)
        # Positions before this conversation: a reconnect adds a whole window, so spans of
        # the lost conversation count as out of the model's context (they are).
        self._earlier_positions = 0
        # Landed spans whose first frame of audio has not come yet: app id -> landing frame.
        self._unheard: dict[int, int] = {}

    def sent(self, span_id: int, span: SentSpan) -> None:
        with self._lock:
            self._sent[span_id] = span

    def new_conversation(self, ready: wire.Ready) -> None:
        with self._lock:
            self._by_server.clear()
        self._unheard.clear()  # a span of the last conversation is not heard in this one
        self._utterances.clear()  # nor are its words still in progress
        self._heard_user = False
        if self._ledger.total:
            self._earlier_positions += (self._ledger.total
                                        + max(ready.context_window, self.context_window))
        self.context_window = ready.context_window
        self._base = self.frames
        self._ledger = ContextLedger(ready.context_window)

    def has_unlanded(self) -> bool:
        with self._lock:
            return bool(self._sent)

    def unlanded(self) -> list[tuple[int, SentSpan]]:
        """Spans sent that have not landed (nor been refused): lost with the connection."""
        with self._lock:
            spans, self._sent = list(self._sent.items()), {}
            self._by_server.clear()
        return spans

    def _local(self, frame: int | None) -> int | None:
        return None if frame is None else self._base + frame

    def _app_id(self, server_id: int | None) -> int | None:
        with self._lock:
            return None if server_id is None else self._by_server.get(server_id)

    # ---- audio ----------------------------------------------------------------------------

    def audio(self, pcm: np.ndarray) -> tuple[ev.AudioOut, ev.FrameStats]:
        """A frame of the model's audio, and the frame's statistics as far as the app knows
        them (no engine time: the server does not send it; context from what was seen)."""
        index = self.frames
        self.frames += 1
        ledger = self._ledger
        ledger.add_frames(1)
        window, used = self.context_window, ledger.total
        usage = ev.ContextUsage(
            window=window, used=min(used, window) if window else used,
            frame_positions=self._earlier_positions + ledger.frame_positions,
            span_positions=ledger.span_positions,
            span_positions_in_window=ledger.span_positions_in_window(),
            wrapped=bool(window) and used > window)
        return ev.AudioOut(index, pcm), ev.FrameStats(index, 0.0, 0.0, usage)

    def quiet_recognition(self) -> list[Mapped]:
        """Once, when the server's recognition was chosen and QUIET_RECOGNITION_FRAMES of a
        conversation brought not a word from it: the server may run without it (the wire
        does not say whether a server recognises)."""
        if (not self.asr or self._heard_user or self._quiet_said
                or self.frames - self._base < QUIET_RECOGNITION_FRAMES):
            return []
        self._quiet_said = True
        seconds = QUIET_RECOGNITION_FRAMES * FRAME_S
        return [AsrError(f"No words have come from the speech server's recognition in "
                         f"{seconds:g} s. If you have spoken, the server may run without "
                         "speech recognition: start it with `python main.py serve --asr "
                         "MODEL`, or let this computer recognise (Settings → Speech model → "
                         "Speech engine, the full install).", fatal=False)]

    def first_audio(self, audio: ev.AudioOut) -> list[ev.FirstAudioAfterSpan]:
        """After `audio` is out: the spans it is the first frame after, as a local engine
        says it (its span landings come from the server before the frame they precede)."""
        heard = [span_id for span_id, landed in self._unheard.items()
                 if audio.frame_index >= landed]
        for span_id in heard:
            del self._unheard[span_id]
        return [ev.FirstAudioAfterSpan(span_id, audio.frame_index, audio.monotonic_s)
                for span_id in heard]

    # ---- events ---------------------------------------------------------------------------

    def map(self, event: object) -> list[Mapped]:
        """Engine events for one wire event (none for those the app makes itself)."""
        read = ENGINE_EVENTS_OF.get(type(event))
        return [] if read is None else read(self, event)

    def _text(self, event: wire.Text) -> list[Mapped]:
        # The frame of the audio before it: its arrival's, or where the server held it a
        # moment (`words`) the audio frames it said were sent before it.
        audio = _count(event.audio)
        before = self.frames if audio is None else self._base + audio
        return [ev.TextPiece(max(0, before - 1), event.delta, -1)]

    def _ret(self, event: wire.Ret) -> list[Mapped]:
        return [ev.RetToken(self._local(event.frame) or 0)]

    def _slot(self, event: wire.Slot) -> list[Mapped]:
        span_id = self._app_id(event.span_id)
        if span_id is None:
            return []
        return [ev.BlockSlot(span_id, max(0, self.frames - 1), 0, event.prefill_ms,
                             event.step_ms, event.total_ms, event.over_budget)]

    def _error(self, event: wire.Error) -> list[Mapped]:
        if event.stage == "frame":  # a refused frame: counted by the engine, not shown
            return []
        if event.stage == "asr" and self.asr:
            return [AsrError(f"the speech server's recognition: {event.message}",
                             fatal=False)]
        return [ev.EngineError(f"The speech server says ({event.stage}): {event.message}",
                               fatal=False)]

    def _user_text(self, event: wire.UserText) -> list[Mapped]:
        """The server's recognition as a local recogniser's events, on the app's clock
        (none unless it is the recognition this app uses)."""
        if not self.asr:
            return []
        self._heard_user = True
        utt, end = _count(event.utt), event.t
        if utt is None or not isinstance(end, (int, float)) or not isinstance(event.text, str):
            return []  # not what a server sends: nothing the orchestrator could place
        base = self._base * FRAME_S
        start_s, end_s = base + utt / FRAME_RATE, base + float(end)
        heard, heard_until = self._utterances.get(utt, ([], start_s))
        words = event.text.split()
        same = 0
        while same < min(len(heard), len(words)) and heard[same] == words[same]:
            same += 1
        # The words this message adds were heard since the last one ended.
        out: list[Mapped] = [AsrWord(word, min(heard_until, end_s), end_s)
                             for word in words[same:]]
        if event.final:
            self._utterances.pop(utt, None)
            out.append(AsrFinal(event.text, start_s, end_s, END_OF_TURN_BY_SERVER, end_s))
        else:
            self._utterances[utt] = (words, end_s)
            out.append(AsrPartial(event.text, start_s, end_s))
        return out

    def _queued(self, event: wire.SpanQueued) -> list[Mapped]:
        try:
            app_id = int(event.id) if event.id is not None else None
        except ValueError:
            app_id = None
        with self._lock:
            if app_id is not None and app_id in self._sent:
                self._by_server[event.span_id] = app_id
        return []

    def _accepted(self, event: wire.SpanAccepted) -> list[Mapped]:
        app_id = self._app_id(event.span_id)
        with self._lock:
            span = self._sent.get(app_id) if app_id is not None else None
        if app_id is None or span is None:
            return []
        kept = _count(event.kept_tokens) or event.tokens
        original = max(kept, _count(event.content_tokens) or kept)
        cuts = span.cuts
        if original > kept:
            limit = event.limit if isinstance(event.limit, str) and event.limit else (
                f"the speech model's span limit: {kept:,} tokens")
            cuts += (Cut("the span's content", original, kept, "tokens", limit[:200]),)
        read = _count(event.read_chars)
        read_chars = read if read is not None and read < len(span.text) else None
        if read_chars is None and span.cuts:  # the server read all of what it was sent
            read_chars = len(span.text)
        return [ev.SpanAccepted(app_id, span.source, span.text, event.tokens,
                                event.truncated or original > kept, original, kept,
                                cuts=cuts, read_chars=read_chars)]

    def _landed(self, event: wire.Span) -> list[Mapped]:
        app_id = self._app_id(event.span_id)
        with self._lock:
            span = self._sent.pop(app_id, None) if app_id is not None else None
            self._by_server.pop(event.span_id, None)
        self._ledger.add_span_positions(event.frames)
        if app_id is None or span is None:
            return []
        last = self._local(event.landed_frame) or 0
        self._unheard[app_id] = last
        # Where its positions went, as a local engine says it: the transcript places the
        # span in the window there, and it slides out as the conversation goes on.
        return [ev.SpanChunkInjected(app_id, span.source, last, event.frames, 0,
                                     event.prefill_ms),
                ev.SpanInjected(app_id, span.source, last, last, event.frames, event.chunks,
                                origin_frame=span.origin_frame)]

    def _rejected(self, event: wire.SpanRejected) -> list[Mapped]:
        app_id = self._app_id(event.span_id)
        if app_id is None and event.id is not None:
            try:
                app_id = int(event.id)
            except ValueError:
                app_id = None
        with self._lock:
            span = self._sent.pop(app_id, None) if app_id is not None else None
        if app_id is None or span is None:
            return []
        return [ev.SpanRejected(app_id, span.source, event.reason)]

    def _late(self, event: wire.Late) -> list[Mapped]:
        if event.dropped_by != "engine":  # an orchestrator's: the server's LLM side (below)
            return []
        app_id = self._app_id(event.span_id)
        with self._lock:
            span = self._sent.pop(app_id, None) if app_id is not None else None
        if app_id is None or span is None:
            return []
        origin = span.origin_frame if span.origin_frame is not None else 0
        return [ev.SpanLate(app_id, span.source, span.text, origin, self.frames,
                            event.seconds)]


# Each wire event's engine events: its type -> the mapper's handler (the mapper, the event).
ENGINE_EVENTS_OF: dict[type, Callable[[EngineEventMapper, Any], list[Mapped]]] = {
    wire.Text: EngineEventMapper._text,
    wire.Ret: EngineEventMapper._ret,
    wire.SpanQueued: EngineEventMapper._queued,
    wire.SpanAccepted: EngineEventMapper._accepted,
    wire.Span: EngineEventMapper._landed,
    wire.SpanRejected: EngineEventMapper._rejected,
    wire.Late: EngineEventMapper._late,
    wire.Slot: EngineEventMapper._slot,
    wire.UserText: EngineEventMapper._user_text,
    wire.Error: EngineEventMapper._error,
}

# The wire events that are no engine event here, and why.
NOT_ENGINE_EVENTS: dict[type, str] = {
    wire.Ready: "the connection's: a conversation begins (new_conversation)",
    wire.Busy: "the connection's: the server holds another conversation",
    wire.Voice: "the connection's: the voice the server switched to",
    wire.AudioCodec: "the connection's: the audio's codec from the next message on",
    wire.Words: "the connection's: its client rebuilds the `text` and `user_text` it holds",
    # An LLM side on the server's; this app runs its own (remote_engine.py), so there is
    # none to show (an orchestrator's `late` likewise, in _late).
    wire.Question: "the server's LLM side",
    wire.NoSpan: "the server's LLM side",
}


def _count(value: object) -> int | None:
    """A count a server sent, if it is one (a non-negative int, not a bool)."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None
