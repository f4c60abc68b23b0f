"""The transcript's entry type now lives in `app.transcript_entries` (below every layer that
shares it); this name stays so older imports keep working."""

from app.transcript_entries import EntryKind, SpanContext, TranscriptEntry, closed

__all__ = ["EntryKind", "SpanContext", "TranscriptEntry", "closed"]
