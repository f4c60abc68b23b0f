"""What a conversation's queues carry: one vocabulary, a union of each stage's own.

Each stage types what it says and is handed a sink for it (`send_events_to`, before it
starts): the speech engine its events (app/engine/events.py; a server's engine its link's
too, app/remote/events.py, and the server's recognition's), the recogniser its words
(app/asr/events.py), the orchestrator its turns (app/orchestrator/events.py). The pipeline
hands each of them its router's queue, which carries the union below, and routes each kind
to where it goes (pipeline.py's table); the reader of the pipeline's events (the session's
inbox, a server's connection, a run's record) is handed the same union. A stage's sink takes
its own events only, so a stage that says something new is a type error until the union
names it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import get_args

from app.asr.events import AsrEvent
from app.engine.events import EngineEvent
from app.orchestrator.events import OrchestratorEvent
from app.remote.events import LinkEvent

ConversationEvent = EngineEvent | AsrEvent | OrchestratorEvent | LinkEvent

# Where a conversation's events go (a queue's `put`, the session's inbox, a server's loop).
EventSink = Callable[[ConversationEvent], None]

# Each stage's kinds, for the router's table.
ENGINE_EVENTS: tuple[type, ...] = get_args(EngineEvent)
ASR_EVENTS: tuple[type, ...] = get_args(AsrEvent)
ORCHESTRATOR_EVENTS: tuple[type, ...] = get_args(OrchestratorEvent)
LINK_EVENTS: tuple[type, ...] = get_args(LinkEvent)
