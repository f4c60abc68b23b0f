"""The server's engine: the checkpoint, loaded once, and its conversation rows.

One engine (app/engine/local_engine.py) serves every conversation: with `serve` it has one
row, which conversations take one after another; with `serve --slots N`, N rows in one
batched step per frame. It warms up once, when the server starts. A conversation takes a
slot (a `Lease`), and the lease owns the conversation it builds on one of the engine's rows:
whatever ends the connection, and whenever (before the conversation started, while it was
being built, mid-frame), releasing the lease stops that conversation, so its row comes back.
`/health` and `/metrics` read the engine's rows, so they say what is true. The LLM side,
when the server has one, is built with it by app/conversation/assembly.py, where every
conversation is assembled.

The STT (`--asr`) is one recogniser for every slot (app/asr/recogniser.py): ONE model with
a row per slot, one batched step a frame; a conversation's recognition takes a row with its
engine row, and gives it back with it.

Each is kept by a `Supervisor` (supervisor.py): when one fails mid-run its conversations are
told why, a new one on the same weights is warmed up and serves, and in between `state`
says "restarting" with the reason (a client who knocks is told so); when none can serve
again, `on_fatal` is called and `serve` exits non-zero for its own supervisor to restart it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from app.asr.asr_thread import AsrOptions, StreamingAsr
from app.asr.recogniser import Recogniser
from app.checkpoints.loader import LoadedCheckpoint
from app.conversation.assembly import build_pipeline, load_speech_model, load_stt_model
from app.conversation.config import ConversationConfig
from app.conversation.pipeline import ConversationPipeline
from app.engine.conversation_start import list_voices
from app.engine.local_engine import LocalEngine
from app.engine.row_conversation import RowConversation
from app.engine.speech_engine import ConversationStats, EngineOptions
from app.row_host import HostFailedError
from app.server.supervisor import Supervisor

if TYPE_CHECKING:
    from app.asr.stt_catalog import LoadedStt

WARM_UP_TIMEOUT_S = 600.0  # a batched 7B warms up every row's graphs once

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ConversationChoice:
    """What a client may choose before its conversation's first frame."""

    persona: str | None = None
    name: str | None = None
    city: str | None = None
    voice: str | None = None


class EngineHost:
    def __init__(self, checkpoint: LoadedCheckpoint, engine_options: EngineOptions | None = None,
                 conversation: ConversationConfig | None = None,
                 stt: LoadedStt | None = None, slots: int = 1) -> None:
        """`stt`: the speech recogniser's model of `conversation`, loaded once: one
        recogniser of `slots` rows serves every conversation (None: each conversation
        loads its own, if it has one). The engine, with `slots` rows, starts warming up
        now."""
        if slots < 1:
            raise ValueError("--slots must be at least 1")
        self.checkpoint = checkpoint
        self.engine_options = engine_options or EngineOptions()
        self.conversation = conversation
        self.stt = stt
        manifest = checkpoint.manifest
        self.model_id = manifest.id
        self.device = str(checkpoint.device)
        start = manifest.conversation_start
        self.takes_persona = start.kind == "persona_prompt"
        self.voices: tuple[str, ...] = (
            tuple(list_voices(start, checkpoint.folder)) if self.takes_persona else ())
        self.slots = slots
        self._leases: set[Lease] = set()
        self.stuck: str | None = None  # an engine that would not stop keeps the slot
        self._on_fatal: Callable[[str], None] | None = None
        self.fatal: str | None = None  # why nothing will serve again: `serve` exits non-zero
        self._recognition: Supervisor[Recogniser] | None = None
        if stt is not None:
            self._recognition = Supervisor(lambda: Recogniser(stt, slots), WARM_UP_TIMEOUT_S,
                                           self._fatal)
        self._newest: dict[int, RowConversation] = {}  # each row's newest conversation
        self._engine = Supervisor(lambda: LocalEngine(checkpoint, slots, self.engine_options),
                                  WARM_UP_TIMEOUT_S, self._fatal)

    @property
    def engine(self) -> LocalEngine:
        """The engine serving now (a new one after a failure)."""
        return self._engine.current

    @property
    def recogniser(self) -> Recogniser | None:
        return None if self._recognition is None else self._recognition.current

    def _parts(self) -> list[Supervisor[LocalEngine] | Supervisor[Recogniser]]:
        return [self._engine] + ([self._recognition] if self._recognition is not None else [])

    @property
    def state(self) -> str:
        """ready, starting, restarting or failed (the worst of the engine's and the
        recogniser's), or error when a conversation would not stop."""
        states = [part.state for part in self._parts()]
        for worst in ("failed", "restarting", "starting"):
            if worst in states:
                return worst
        return "error" if self.stuck else "ready"

    @property
    def serving(self) -> bool:
        """Conversations can start (a stuck one keeps its slot; the others serve)."""
        return self.state in ("ready", "error")

    @property
    def unavailable(self) -> str | None:
        """Why a new conversation cannot start now (None: it can, when a slot is free)."""
        for part in self._parts():
            if part.reason is not None:
                return part.reason
        if self.state == "starting":
            return "the speech engine is still warming up"
        return None

    @property
    def failures(self) -> int:
        """Engine and recogniser failures while serving, since the server started."""
        return sum(part.failures for part in self._parts())

    @property
    def restarts(self) -> int:
        return sum(part.restarts for part in self._parts())

    def on_fatal(self, callback: Callable[[str], None]) -> None:
        """`callback(reason)` when nothing will serve again (called at once if so already)."""
        self._on_fatal = callback
        if self.fatal is not None:
            callback(self.fatal)

    def _fatal(self, reason: str) -> None:
        if self.fatal is None:
            self.fatal = reason
        if self._on_fatal is not None:
            self._on_fatal(reason)

    @classmethod
    def load(cls, config: ConversationConfig, engine_options: EngineOptions | None = None,
             slots: int = 1) -> EngineHost:
        """Load the checkpoint `config` names (minutes for a 7B) and warm the engine up;
        blocks. `config`: the speech model and the LLM side (a speech model alone: the
        defaults); `slots`: conversations at once."""
        checkpoint = load_speech_model(config)
        stt = None
        if config.has_stt:
            # Once, not once per conversation: one recogniser serves every slot.
            stt = load_stt_model(config, checkpoint.device)
        host = cls(checkpoint, engine_options, config, stt, slots=slots)
        try:
            host.wait_warm()
        except BaseException:
            host.close()  # an engine that did not warm up still holds its thread
            raise
        return host

    def wait_warm(self, timeout: float = WARM_UP_TIMEOUT_S) -> None:
        """Blocks until the engine (and the recogniser) is ready; RuntimeError at once if
        one failed, with the reason (or once `timeout` passed)."""
        for part in self._parts():
            if part.reason is not None:
                raise RuntimeError(part.reason)
            try:
                part.current.wait_ready(timeout)
            except HostFailedError as exc:
                raise RuntimeError(part.reason or str(exc)) from exc

    def close(self, timeout: float = 10.0) -> bool:
        """Stop the engine and the recogniser; True once their threads ended."""
        stopped = [part.close(timeout) for part in reversed(self._parts())]
        return all(stopped)

    @property
    def busy(self) -> bool:
        """Every slot holds a conversation."""
        return self.free_slots == 0

    @property
    def free_slots(self) -> int:
        """Slots a new client can take: neither leased nor held by a conversation (none
        while the engine is not ready)."""
        if not self.serving:
            return 0
        return max(0, min(self.slots - len(self._leases), self.engine.free_rows))

    def try_lease(self) -> Lease | None:
        """A slot, or None while every one holds a conversation or the engine cannot take
        one (`unavailable` says why; event loop thread only)."""
        if self.busy or not self.serving:
            return None
        lease = Lease(self)
        self._leases.add(lease)
        return lease

    def _release(self, lease: Lease) -> None:
        self._leases.discard(lease)

    def active_rows(self) -> frozenset[int]:
        """The engine's rows a conversation holds now."""
        return frozenset(row for row, held in enumerate(self.engine.conversations())
                         if held is not None)

    def slot_stats(self) -> list[tuple[int, ConversationStats | None]]:
        """Each row: its newest conversation's figures (None: it has held none yet)."""
        newest = dict(self._newest)  # a copy: conversations are built off the loop
        return [(row, held.stats() if (held := newest.get(row)) else None)
                for row in range(self.slots)]

    def persona_for(self, choice: ConversationChoice) -> str | None:
        if not self.takes_persona:
            return None
        start = self.checkpoint.manifest.conversation_start
        return choice.persona or self.engine_options.role or start.default_role

    def options_for(self, choice: ConversationChoice) -> EngineOptions:
        base = self.engine_options
        return replace(base, role=choice.persona or base.role,
                       user_name=choice.name or base.user_name,
                       user_city=choice.city or base.user_city,
                       voice=choice.voice or base.voice)

    def open_row(self, choice: ConversationChoice) -> RowConversation:
        """A conversation on a free row of the engine, not started."""
        self.wait_warm()
        conversation = self.engine.open(self.options_for(choice))
        if conversation is None:  # the lease count keeps this from happening
            raise RuntimeError(f"all {self.slots} slots hold a conversation")
        self._newest[conversation.row] = conversation
        return conversation

    def open_recognition(self) -> StreamingAsr | None:
        """A row of the shared recogniser, not started (None: the server has none)."""
        if self.recogniser is None:
            return None
        config = self.conversation or ConversationConfig()
        asr = self.recogniser.open(AsrOptions(force_vad=config.force_vad))
        if asr is None:  # the lease count keeps this from happening
            raise RuntimeError(f"all {self.slots} rows of the recogniser are held")
        return asr

    def pipeline_for(self, conversation: RowConversation, asr: StreamingAsr | None = None
                     ) -> ConversationPipeline:
        """The conversation's pipeline (blocks: an STT may load). `asr`: its row of the
        shared recogniser."""
        return build_pipeline(conversation, self.conversation or ConversationConfig(),
                              self.checkpoint.device, asr=asr)


class Lease:
    """The right to run one conversation at a time on the host, until `release`. It owns
    each conversation it builds (its engine row and its recogniser row): releasing it stops
    the one it holds (its rows come back), even one still being built on another thread
    when the client vanished."""

    def __init__(self, host: EngineHost) -> None:
        self.host = host
        self._lock = threading.Lock()
        self._released = False
        self._held: tuple[RowConversation, StreamingAsr | None] | None = None

    def build(self, choice: ConversationChoice) -> tuple[RowConversation, ConversationPipeline]:
        """A conversation on a free row and its pipeline, not started (blocks: run it off
        the event loop). Raises RuntimeError once the lease is released."""
        conversation = self.host.open_row(choice)
        try:
            asr = self.host.open_recognition()
        except BaseException:
            conversation.stop(0.0)  # never started: its row is free at once
            raise
        with self._lock:
            if self._released:  # the client left while this was being built
                _stop_unstarted(conversation, asr)
                raise RuntimeError("the connection ended while its conversation was built")
            self._held = (conversation, asr)
        try:
            pipeline = self.host.pipeline_for(conversation, asr)
        except BaseException:
            _stop_unstarted(conversation, asr)
            raise
        return conversation, pipeline

    def release(self, engine_stopped: bool = True) -> None:
        with self._lock:
            self._released = True
            held, self._held = self._held, None
        if held is not None:
            # Never started (built while the client left): its rows are free at once;
            # else they leave at the next frame boundary, if the connection's stop did
            # not end them.
            _stop_unstarted(*held)
        if not engine_stopped:
            # Its conversation still holds a row the engine's thread runs: that row stays
            # taken; the others go on.
            self.host.stuck = "a conversation did not stop; restart the server"
            log.error("a conversation did not stop: its slot stays taken")
            return
        self.host._release(self)


def _stop_unstarted(conversation: RowConversation, asr: StreamingAsr | None) -> None:
    """Give the rows back without waiting: free at once if never started."""
    conversation.stop(0.0)
    if asr is not None:
        asr.stop(0.0)
