"""A span's life as the engine tells it, gathered into one object for whoever writes it out.

The engine says a span in several events: `SpanAccepted` (its text, its tokens), one
`SpanChunkInjected` per forward pass, then `SpanInjected` when its last chunk landed. The run's
JSONL (app/conversation/run_records.py) and the server's wire (app/server/event_mapping.py)
each write a landed span as one line, so both gather the same events the same way: here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from app.engine import events as ev


@dataclass
class LandingSpan:
    """An accepted span and the chunks of it that landed so far."""

    accepted: ev.SpanAccepted
    chunks: list[ev.SpanChunkInjected] = field(default_factory=list)

    @property
    def prefill_ms(self) -> float:
        """The wall time of its forward passes so far, all chunks together."""
        return sum(chunk.prefill_ms for chunk in self.chunks)


class LandingSpans:
    """The spans accepted and not landed yet, by span id."""

    def __init__(self) -> None:
        self._spans: dict[int, LandingSpan] = {}

    def accepted(self, event: ev.SpanAccepted) -> None:
        self._spans[event.span_id] = LandingSpan(event)

    def chunk(self, event: ev.SpanChunkInjected) -> LandingSpan | None:
        """The span with this chunk added (None: a span this side never saw accepted)."""
        span = self._spans.get(event.span_id)
        if span is not None:
            span.chunks.append(event)
        return span

    def landed(self, span_id: int) -> LandingSpan | None:
        """The span whose last chunk landed, no longer waiting (None: never seen accepted)."""
        return self._spans.pop(span_id, None)

    def dropped(self, span_id: int) -> None:
        """A span that will not land (the engine refused it)."""
        self._spans.pop(span_id, None)

    def unfinished(self) -> list[LandingSpan]:
        """The spans some of whose chunks landed and not all (an input that ended)."""
        return [span for span in self._spans.values() if span.chunks]
