"""The server's engine: the checkpoint, loaded once, and its conversation slots.

A conversation takes a slot (a `Lease`) and gives it back only once its engine has let it
go. With one slot (`serve`, the default) each conversation gets a fresh DuplexEngine: two
engines must never stream on the same model at once. With `serve --slots N` one
BatchedEngine (app/engine/batched/) holds N conversations in one batched forward per
frame, and each conversation is one of its EngineSlots. The LLM side, when the server has
one, is built with it by app/conversation/assembly.py, where every conversation is
assembled.

The STT (`--asr`) keeps its streaming state in its own modules, so one loaded recogniser
serves one conversation at a time: with N slots, N are loaded, and a lease holds one.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, cast

from app.checkpoints.loader import LoadedCheckpoint
from app.conversation.assembly import (
    build_engine,
    build_pipeline,
    load_speech_model,
    load_stt_model,
)
from app.conversation.config import ConversationConfig
from app.conversation.pipeline import ConversationPipeline
from app.engine.conversation_start import list_voices
from app.engine.duplex_engine import DuplexEngine, EngineOptions

if TYPE_CHECKING:
    from app.asr.stt_catalog import LoadedStt
    from app.engine.batched.batched_engine import BatchedEngine
    from app.engine.batched.engine_slot import EngineSlot
    from app.engine.batched.slot_stats import SlotStats

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
        past the first. `slots` > 1: a BatchedEngine holds that many conversations (it
        starts warming up now)."""
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
        self.batched: BatchedEngine | None = None
        self._slots_by_row: dict[int, EngineSlot] = {}  # the newest conversation of a row
        if slots > 1:
            from app.engine.batched.batched_engine import BatchedEngine
            from app.engine.mlx.checkpoint import MlxCheckpoint

            if isinstance(checkpoint, MlxCheckpoint):
                raise ValueError("--slots needs the torch engine: the MLX engine holds one "
                                 "conversation")
            self.batched = BatchedEngine(checkpoint, slots, self.engine_options)
            self.batched.start()

    @classmethod
    def load(cls, model_id: str, device: str | None = None, dtype: str | None = None,
             folder: Path | None = None, engine_options: EngineOptions | None = None,
             conversation: ConversationConfig | None = None, slots: int = 1,
             precision: str | None = None) -> EngineHost:
        """Load the checkpoint (minutes for a 7B); blocks. `conversation`: the LLM side
        (None: the speech model alone); the arguments name the speech model; `slots`:
        conversations at once (more than one: on a BatchedEngine, warmed up here);
        `precision`: app/engine/precision.py (None or "auto": the best that fits)."""
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
            host.close()  # a batched engine that did not warm up still holds its thread
            raise
        return host

    def wait_warm(self, timeout: float = WARM_UP_TIMEOUT_S) -> None:
        """Blocks until the batched engine (if any) has warmed up; RuntimeError if it
        failed or took longer."""
        batched = self.batched
        if batched is None or batched.ready.is_set():
            return
        if not batched.ready.wait(timeout) or not batched.running:
            raise RuntimeError("the batched engine did not warm up"
                               + ("" if batched.running else ": it stopped (see the log)"))

    def close(self, timeout: float = 10.0) -> bool:
        """Stop the batched engine (if any); True once its thread ended."""
        return self.batched.stop(timeout) if self.batched is not None else True

    @property
    def busy(self) -> bool:
        """Every slot holds a conversation."""
        return len(self._leases) >= self.slots

    @property
    def free_slots(self) -> int:
        return max(0, self.slots - len(self._leases))

    def try_lease(self) -> Lease | None:
        """A slot, or None while every one holds a conversation (event loop thread only)."""
        if self.busy or (self.batched is not None and not self.batched.ready.is_set()):
            return None
        lease = Lease(self, self._free_stts.pop())
        self._leases.add(lease)
        return lease

    def _release(self, lease: Lease) -> None:
        if lease in self._leases:
            self._leases.discard(lease)
            self._free_stts.append(lease.stt)

    def active_rows(self) -> frozenset[int]:
        """The batched engine's rows a conversation holds now."""
        slots = dict(self._slots_by_row)  # a copy: conversations are built off the loop
        return frozenset(row for row, slot in slots.items() if slot.running)

    def slot_stats(self) -> list[tuple[int, SlotStats | None]]:
        """Each row of the batched engine: its conversation's figures (None: it has held
        none yet); empty with one slot (a DuplexEngine per conversation)."""
        if self.batched is None:
            return []
        slots = dict(self._slots_by_row)  # a copy: conversations are built off the loop
        return [(row, slot.stats() if (slot := slots.get(row)) else None)
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

    def build(self, choice: ConversationChoice, stt: LoadedStt | None = None
              ) -> tuple[DuplexEngine, ConversationPipeline]:
        """A fresh engine (or a slot of the batched one: it has the same face) and its
        pipeline, not started (blocks: an STT may load). `stt`: the lease's recogniser."""
        options = self.options_for(choice)
        if self.batched is None:
            engine = build_engine(self.checkpoint, options)
        else:
            self.wait_warm()
            slot = self.batched.open_slot(options)
            if slot is None:  # the lease count keeps this from happening
                raise RuntimeError(f"all {self.slots} slots hold a conversation")
            self._slots_by_row[slot.row] = slot
            engine = cast(DuplexEngine, slot)  # the pipeline drives a slot as an engine
        return engine, build_pipeline(engine, self.conversation or ConversationConfig(),
                                      self.checkpoint.device, stt=stt or self.stt,
                                      checkpoint=self.checkpoint if self.batched else None)


class Lease:
    """The right to run one conversation on the host, until `release` (after its engine, or
    its slot, let it go). It holds the recogniser its conversations use, if any."""

    def __init__(self, host: EngineHost, stt: LoadedStt | None = None) -> None:
        self.host = host
        self.stt = stt

    def build(self, choice: ConversationChoice) -> tuple[DuplexEngine, ConversationPipeline]:
        return self.host.build(choice, self.stt)

    def release(self, engine_stopped: bool = True) -> None:
        if not engine_stopped:
            # Its thread still runs on the model: no other conversation may start.
            self.host.stuck = "an engine thread did not stop; restart the server"
            log.error("an engine thread did not stop: the engine stays busy")
            return
        self.host._release(self)
