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

The STT (`--asr`) keeps its streaming state in its own modules, so one loaded recogniser
serves one conversation at a time: with N slots, N are loaded, and a lease holds one.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from app.checkpoints.loader import LoadedCheckpoint
from app.conversation.assembly import build_pipeline, load_speech_model, load_stt_model
from app.conversation.config import ConversationConfig
from app.conversation.pipeline import ConversationPipeline
from app.engine.conversation_start import list_voices
from app.engine.local_engine import LocalEngine
from app.engine.row_conversation import RowConversation
from app.engine.speech_engine import ConversationStats, EngineOptions

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
                 stt: LoadedStt | None = None, slots: int = 1,
                 more_stts: tuple[LoadedStt, ...] = ()) -> None:
        """`stt`: the speech recogniser of `conversation`, loaded once (None: each
        conversation loads its own, if it has one); `more_stts`: one more for each slot
        past the first. The engine, with `slots` rows, starts warming up now."""
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
        # The recognisers a lease takes one of (None: each conversation loads its own).
        self._free_stts: list[LoadedStt | None] = (
            [stt, *more_stts] if stt is not None else [None] * slots)
        if len(self._free_stts) != slots:
            raise ValueError(f"{slots} slots need {slots} loaded recognisers, one each")
        self._newest: dict[int, RowConversation] = {}  # each row's newest conversation
        self.engine = LocalEngine(checkpoint, slots, self.engine_options)
        self.engine.start()

    @classmethod
    def load(cls, model_id: str, device: str | None = None, dtype: str | None = None,
             folder: Path | None = None, engine_options: EngineOptions | None = None,
             conversation: ConversationConfig | None = None, slots: int = 1,
             precision: str | None = None) -> EngineHost:
        """Load the checkpoint (minutes for a 7B) and warm the engine up; blocks.
        `conversation`: the LLM side (None: the speech model alone); the arguments name the
        speech model; `slots`: conversations at once; `precision`: app/engine/precision.py
        (None or "auto": the best that fits)."""
        speech = replace(conversation or ConversationConfig(), model_id=model_id,
                         custom_folder=str(folder) if folder else None,
                         device=device or "auto", dtype=dtype or "auto",
                         precision=precision or "auto")
        checkpoint = load_speech_model(speech)
        stts: list[LoadedStt] = []
        if conversation is not None and conversation.has_stt:
            # Not once per conversation: once per slot (the module's docstring says why).
            stts = [load_stt_model(conversation, checkpoint.device) for _ in range(slots)]
        host = cls(checkpoint, engine_options, conversation, stts[0] if stts else None,
                   slots=slots, more_stts=tuple(stts[1:]))
        try:
            host.wait_warm()
        except BaseException:
            host.close()  # an engine that did not warm up still holds its thread
            raise
        return host

    def wait_warm(self, timeout: float = WARM_UP_TIMEOUT_S) -> None:
        """Blocks until the engine has warmed up; RuntimeError if it failed or took longer."""
        engine = self.engine
        if engine.ready.is_set() and engine.running:
            return
        if not engine.ready.wait(timeout) or not engine.running:
            raise RuntimeError("the speech engine did not warm up"
                               + ("" if engine.running else ": it stopped (see the log)"))

    def close(self, timeout: float = 10.0) -> bool:
        """Stop the engine; True once its thread ended."""
        return self.engine.stop(timeout)

    @property
    def busy(self) -> bool:
        """Every slot holds a conversation."""
        return self.free_slots == 0

    @property
    def free_slots(self) -> int:
        """Slots a new client can take: neither leased nor held by a conversation."""
        return max(0, min(self.slots - len(self._leases), self.engine.free_rows))

    def try_lease(self) -> Lease | None:
        """A slot, or None while every one holds a conversation (event loop thread only)."""
        if self.busy or not self.engine.ready.is_set():
            return None
        lease = Lease(self, self._free_stts.pop())
        self._leases.add(lease)
        return lease

    def _release(self, lease: Lease) -> None:
        if lease in self._leases:
            self._leases.discard(lease)
            self._free_stts.append(lease.stt)

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

    def pipeline_for(self, conversation: RowConversation, stt: LoadedStt | None = None
                     ) -> ConversationPipeline:
        """The conversation's pipeline (blocks: an STT may load). `stt`: the lease's."""
        return build_pipeline(conversation, self.conversation or ConversationConfig(),
                              self.checkpoint.device, stt=stt or self.stt)


class Lease:
    """The right to run one conversation at a time on the host, until `release`. It holds
    the recogniser its conversations use, if any, and owns each conversation it builds:
    releasing it stops the one it holds (its row comes back), even one still being built
    on another thread when the client vanished."""

    def __init__(self, host: EngineHost, stt: LoadedStt | None = None) -> None:
        self.host = host
        self.stt = stt
        self._lock = threading.Lock()
        self._released = False
        self._held: RowConversation | None = None

    def build(self, choice: ConversationChoice) -> tuple[RowConversation, ConversationPipeline]:
        """A conversation on a free row and its pipeline, not started (blocks: run it off
        the event loop). Raises RuntimeError once the lease is released."""
        conversation = self.host.open_row(choice)
        with self._lock:
            if self._released:  # the client left while this was being built
                conversation.stop(0.0)
                raise RuntimeError("the connection ended while its conversation was built")
            self._held = conversation
        try:
            pipeline = self.host.pipeline_for(conversation, self.stt)
        except BaseException:
            conversation.stop(0.0)  # never started: its row is free at once
            raise
        return conversation, pipeline

    def release(self, engine_stopped: bool = True) -> None:
        with self._lock:
            self._released = True
            held, self._held = self._held, None
        if held is not None:
            # Never started (built while the client left): its row is free at once; else
            # it leaves at the next frame boundary, if the connection's stop did not end it.
            held.stop(0.0)
        if not engine_stopped:
            # Its conversation still holds a row the engine's thread runs: that row stays
            # taken; the others go on.
            self.host.stuck = "a conversation did not stop; restart the server"
            log.error("a conversation did not stop: its slot stays taken")
            return
        self.host._release(self)
