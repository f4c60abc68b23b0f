"""Turn pipeline events into transcript entries (plain data for the transcript panel).

The model's words and the user's partial transcript grow in place: successive pieces
update one entry until a pause (or the user's end of turn) closes it.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable

from app.asr.events import AsrError, AsrFinal, AsrPartial
from app.engine import events as ev
from app.orchestrator import events as oe
from app.ui.transcript_entries import TranscriptEntry

FRAME_S = 0.08
ASSISTANT_PAUSE_FRAMES = 12  # ~1 s without words closes the model's utterance


class TranscriptBuilder:
    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._ids = itertools.count(1)
        self._assistant: TranscriptEntry | None = None
        self._assistant_last_frame = -1
        self._user: TranscriptEntry | None = None
        self._spans: dict[int, TranscriptEntry] = {}
        self._span_text: dict[int, tuple[str, str]] = {}
        self._retrievals: dict[int, TranscriptEntry] = {}  # <ret> frame -> its entry

    def remember_span(self, span_id: int, text: str, source: str) -> None:
        """Spans the UI queued itself (typed, dropped): their text and source for display."""
        self._span_text[span_id] = (text, source)

    def entries_for(self, event: object) -> list[TranscriptEntry]:
        now = self._clock()
        out: list[TranscriptEntry] = []
        if isinstance(event, ev.TextPiece):
            out += self._assistant_piece(event, now)
        elif isinstance(event, ev.FrameStats):
            if (self._assistant is not None and not self._assistant.final
                    and event.frame_index - self._assistant_last_frame > ASSISTANT_PAUSE_FRAMES):
                self._assistant = _replace(self._assistant, final=True)
                out.append(self._assistant)
        elif isinstance(event, AsrPartial):
            entry_id = self._user.entry_id if self._user and not self._user.final else next(
                self._ids)
            self._user = TranscriptEntry(entry_id, "user", event.text, now,
                                         conversation_s=event.start_s, final=False)
            out.append(self._user)
        elif isinstance(event, AsrFinal):
            if event.text.strip():
                out += self._close_assistant()
                entry_id = (self._user.entry_id if self._user and not self._user.final
                            else next(self._ids))
                self._user = TranscriptEntry(entry_id, "user", event.text, now,
                                             conversation_s=event.start_s,
                                             detail=f"end of turn by {event.detected_by}")
                out.append(self._user)
        elif isinstance(event, ev.SpanAccepted):
            text, source = self._span_text.get(event.span_id, (event.text, event.source))
            detail = "queued"
            if event.truncated:
                detail = (f"truncated: {event.kept_content_tokens} of "
                          f"{event.original_content_tokens} tokens kept")
            entry = TranscriptEntry(next(self._ids), "span", text, now, source=source,
                                    detail=detail, final=False)
            self._spans[event.span_id] = entry
            out.append(entry)
        elif isinstance(event, ev.SpanInjected):
            entry = self._spans.pop(event.span_id, None)
            if entry is not None:
                out += self._close_assistant()
                detail = f"{event.positions} positions in {event.chunks} chunk(s)"
                if event.origin_frame is not None:
                    after = (event.last_frame - event.origin_frame) * FRAME_S
                    detail = f"{detail}; landed {after:.2f} s after <ret>"
                if entry.detail.startswith("truncated"):
                    detail = f"{entry.detail}; {detail}"
                out.append(_replace(entry, final=True, landed_frame=event.last_frame,
                                    conversation_s=event.last_frame * FRAME_S, detail=detail,
                                    wall_time=now))
        elif isinstance(event, oe.ToolCalled):
            status = "ok" if event.ok else f"failed: {event.error}"
            args = ", ".join(f"{k}={v!r}" for k, v in event.arguments.items())
            text = f"{event.tool}({args})"
            detail = f"{status}; {event.chars} characters" + (" (truncated)"
                                                               if event.truncated else "")
            out.append(TranscriptEntry(next(self._ids), "tool", text, now,
                                       source=event.source, detail=detail))
        elif isinstance(event, oe.TurnFailed):
            out.append(self._notice(f"The LLM could not answer: {event.message}", now,
                                    "warning"))
        elif isinstance(event, (ev.EngineError, AsrError)):
            out.append(self._notice(event.message, now, "error" if event.fatal else "warning"))
        elif isinstance(event, ev.SpanRejected):
            out.append(self._notice(f"A span from {event.source} was not injected: "
                                    f"{event.reason}", now, "warning"))
        else:
            out += self._retrieval_entries(event, now)
        return out

    def _retrieval_entries(self, event: object, now: float) -> list[TranscriptEntry]:
        """The model's own <ret>: one entry per retrieval, updated as it goes on."""
        def update(ret_frame: int, text: str, severity: str = "info") -> list[TranscriptEntry]:
            entry = self._retrievals.get(ret_frame)
            if entry is None:
                entry = TranscriptEntry(next(self._ids), "notice", "", now,
                                        conversation_s=ret_frame * FRAME_S, detail=severity)
            entry = _replace(entry, text=text, detail=severity)
            self._retrievals[ret_frame] = entry
            return [entry]

        def at(frame: int) -> str:
            return f"at {frame * FRAME_S:.1f} s"

        if isinstance(event, ev.RetToken):
            return update(event.frame_index,
                          f"The model asked for information (<ret>) {at(event.frame_index)}")
        if isinstance(event, oe.RetrievalQuestion):
            how = {"cache": "your last words", "wait": "what you were saying",
                   "window": "the last seconds of speech"}.get(event.plan, event.plan)
            if not event.question:
                return update(event.ret_frame, f"The model asked for information (<ret>) "
                                               f"{at(event.ret_frame)}; nothing was heard")
            return update(event.ret_frame,
                          f"The model asked for information (<ret>) {at(event.ret_frame)}; "
                          f"asking the LLM, from {how}: “{event.question}”")
        if isinstance(event, oe.NoSpan):
            entry = self._retrievals.get(event.ret_frame)
            base = entry.text if entry is not None else "The model asked for information"
            return update(event.ret_frame, f"{base} — nothing injected: {event.reason}")
        if isinstance(event, oe.RetrievalLate):
            return [self._notice(f"The answer to “{event.question}” came {event.seconds:.1f} s "
                                 "after <ret>, past the model's deadline: dropped", now,
                                 "warning")]
        if isinstance(event, ev.SpanLate):
            return [self._notice(f"A span from {event.source} reached the model "
                                 f"{event.seconds:.1f} s after <ret>, past its deadline: "
                                 "dropped", now, "warning")]
        if isinstance(event, oe.RetrievalIgnored):
            return [self._notice(f"The model asked again {at(event.ret_frame)} while a "
                                 "retrieval was pending: ignored", now, "info")]
        if isinstance(event, ev.BlockSlot) and event.over_budget:
            return [self._notice(f"A {event.positions}-token span block and its frame took "
                                 f"{event.total_ms:.0f} ms, over the 80 ms frame", now,
                                 "warning")]
        return []

    def notice(self, message: str, severity: str = "info") -> TranscriptEntry:
        return self._notice(message, self._clock(), severity)

    def typed(self, text: str) -> list[TranscriptEntry]:
        closed = self._close_assistant()
        return [*closed, TranscriptEntry(next(self._ids), "user", text, self._clock(),
                                         detail="typed")]

    def _close_assistant(self) -> list[TranscriptEntry]:
        """The user's turn or a landed span ends the model's utterance in the transcript,
        so what the model says next reads below it, in order."""
        if self._assistant is None or self._assistant.final:
            return []
        self._assistant = _replace(self._assistant, final=True)
        return [self._assistant]

    def _notice(self, message: str, now: float, severity: str) -> TranscriptEntry:
        return TranscriptEntry(next(self._ids), "notice", message, now, detail=severity)

    def _assistant_piece(self, piece: ev.TextPiece, now: float) -> list[TranscriptEntry]:
        current = self._assistant
        if (current is None or current.final
                or piece.frame_index - self._assistant_last_frame > ASSISTANT_PAUSE_FRAMES):
            closed = [] if current is None or current.final else [_replace(current, final=True)]
            self._assistant = TranscriptEntry(next(self._ids), "assistant", piece.text.lstrip(),
                                              now, conversation_s=piece.frame_index * FRAME_S,
                                              final=False)
            self._assistant_last_frame = piece.frame_index
            return [*closed, self._assistant]
        self._assistant = _replace(current, text=current.text + piece.text)
        self._assistant_last_frame = piece.frame_index
        return [self._assistant]


def _replace(entry: TranscriptEntry, **changes) -> TranscriptEntry:
    from dataclasses import replace

    return replace(entry, **changes)
