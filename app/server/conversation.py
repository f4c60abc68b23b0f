"""One conversation on a server: a row of the host's engine (with its LLM side, when the
server has one), its events delivered to the server's event loop.

The engine thread stays as it is: frames go in without waiting (a full queue is the
caller's to retry), events come out through the pipeline's router thread, which hands each
one to the loop with `call_soon_threadsafe`. Nothing here blocks on the network.
"""

from __future__ import annotations

import asyncio
import contextlib

import numpy as np
import numpy.typing as npt

from app.conversation.events import ConversationEvent
from app.conversation.pipeline import ConversationPipeline
from app.engine.row_conversation import RowConversation
from app.engine.speech_engine import EngineOptions


class LoopQueue:
    """Where the pipeline puts its events (its sink: `put`): each goes to an asyncio queue on
    `loop`.

    Once the loop is closed (the server is gone) events are dropped: the router thread must
    never die of it."""

    def __init__(self, loop: asyncio.AbstractEventLoop,
                 target: asyncio.Queue[ConversationEvent]) -> None:
        self._loop = loop
        self._target = target

    def put(self, event: ConversationEvent) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed
            self._loop.call_soon_threadsafe(self._target.put_nowait, event)


class Conversation:
    def __init__(self, engine: RowConversation, pipeline: ConversationPipeline,
                 loop: asyncio.AbstractEventLoop) -> None:
        self.engine = engine
        self.pipeline = pipeline
        self.events: asyncio.Queue[ConversationEvent] = asyncio.Queue()
        pipeline.send_events_to(LoopQueue(loop, self.events).put)

    @property
    def options(self) -> EngineOptions:
        return self.engine.options

    @property
    def running(self) -> bool:
        return self.engine.running

    def start(self) -> None:
        self.pipeline.start()

    def takes_frame(self) -> bool:
        """Whether a frame pushed now reaches the engine without a drop. The connection
        waits for this rather than pushing and retrying: a retried push counted a dropped
        frame each time (thousands for a conversation that lost none) and handed the
        recogniser, which takes every frame pushed, the same frame again."""
        leveller = self.pipeline.leveller
        if leveller is None:
            return self.engine.room() > 0
        # The leveller hands its frames on without waiting: the engine must have room for
        # those it holds, and for the one it may be handing on now.
        return leveller.room() > 0 and self.engine.room() > leveller.waiting() + 1

    def push_frame(self, pcm: npt.NDArray[np.float32]) -> bool:
        """Never waits: False when the engine's queue is full (then the frame is dropped
        and counted; `takes_frame` first says whether it has room)."""
        return self.pipeline.push_frame(pcm, 0.0)

    def inject(self, text: str, source: str) -> int:
        """A span for the next frame; raises EngineStoppedError or SpanQueueFullError."""
        return self.engine.inject(text, source)

    def stop(self, timeout: float) -> bool:
        """Blocks until every thread ended (run it off the event loop). True when they did."""
        return self.pipeline.stop(timeout)
