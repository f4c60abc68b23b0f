"""What the GUI thread asks of a running session: one frozen message per request.

The GUI thread posts these and returns at once; the session's thread handles them in the
order posted, one handler per type, once the speech engine is up (those posted while it
loads wait in the queue, in order). Everything they change (the transcript's entries, the
LLM side, the engine's spans) is then changed by the session's thread alone.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.settings.schema import AppSettings


@dataclass(frozen=True)
class ApplySettings:
    """Settings changed: apply what can be applied while the conversation runs."""

    settings: AppSettings


@dataclass(frozen=True)
class SendText:
    """A typed question: shown as the user's, and asked to the LLM."""

    text: str


@dataclass(frozen=True)
class InjectText:
    """'Read this': text the user pasted or dropped, to go in as a span, as-is."""

    text: str
    source: str


SessionMessage = ApplySettings | SendText | InjectText
