"""The session's one inbox: every kind of message its thread handles, each a frozen type.

Every source posts into the one queue and the session's thread alone reads it, one message
at a time, waiting with a timeout (the status bar's interval) when it is empty, as the
orchestrator reads its own (app/orchestrator/messages.py):

- the GUI thread's requests (`ApplySettings`, `SendText`, `InjectText`), which return at
  once; handled in the order posted once the speech engine is up (those posted while it
  loads wait, in order), so the transcript has one writer;
- the pipeline's events (engine, recogniser, orchestrator, a server's link: events.py's
  `ConversationEvent`): the pipeline's router posts them here (the session hands it this
  queue's `put`: `ConversationPipeline.send_events_to`);
- the LLM probe's verdict (`app.conversation.llm_probe.LlmProbed`), from its thread;
- `AudioFailed` from the audio's callback, `ResumeAsked` and `StopAsked` from the GUI
  thread: they wake the wait at once instead of being noticed at the next poll.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.conversation.events import ConversationEvent
from app.conversation.llm_probe import LlmProbed
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


@dataclass(frozen=True)
class AudioFailed:
    """An audio device failed (its stream's callback said so): go on without audio."""

    message: str


@dataclass(frozen=True)
class ResumeAsked:
    """Resume: open the audio devices again, or reconnect to the speech server now."""


@dataclass(frozen=True)
class StopAsked:
    """Stop: wakes the session's wait (the stop itself is its stop event)."""


# What the GUI thread asks: handled once the engine is up, in order.
GUI_REQUESTS = (ApplySettings, SendText, InjectText)

# Everything the inbox carries.
SessionMessage = (ApplySettings | SendText | InjectText | AudioFailed | ResumeAsked | StopAsked
                  | LlmProbed | ConversationEvent)
