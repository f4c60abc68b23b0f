"""The server's one engine: the checkpoint, loaded once, and its single conversation slot.

A conversation takes the slot (a `Lease`) and gives it back only once its engine thread has
ended: two engines must never stream on the same model at once. Each conversation gets a
fresh DuplexEngine; the LLM side, when the server has one, is built with it by
app/conversation/assembly.py, where every conversation is assembled.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

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
                 stt: LoadedStt | None = None) -> None:
        """`stt`: the speech recogniser of `conversation`, loaded once (None: each
        conversation loads its own, if it has one)."""
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
        self._lease: Lease | None = None
        self.stuck: str | None = None  # an engine that would not stop keeps the slot

    @classmethod
    def load(cls, model_id: str, device: str | None = None, dtype: str | None = None,
             folder: Path | None = None, engine_options: EngineOptions | None = None,
             conversation: ConversationConfig | None = None) -> EngineHost:
        """Load the checkpoint (minutes for a 7B); blocks. `conversation`: the LLM side
        (None: the speech model alone); the arguments name the speech model."""
        speech = replace(conversation or ConversationConfig(), model_id=model_id,
                         custom_folder=str(folder) if folder else None,
                         device=device or "auto", dtype=dtype or "auto")
        checkpoint = load_speech_model(speech)
        stt = None
        if conversation is not None and conversation.has_stt:
            stt = load_stt_model(conversation, checkpoint.device)  # not once per conversation
        return cls(checkpoint, engine_options, conversation, stt)

    @property
    def busy(self) -> bool:
        return self._lease is not None

    def try_lease(self) -> Lease | None:
        """The slot, or None while a conversation holds it (event loop thread only)."""
        if self._lease is not None:
            return None
        self._lease = Lease(self)
        return self._lease

    def _release(self, lease: Lease) -> None:
        if self._lease is lease:
            self._lease = None

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

    def build(self, choice: ConversationChoice) -> tuple[DuplexEngine, ConversationPipeline]:
        """A fresh engine and its pipeline, not started (blocks: an STT may load)."""
        engine = build_engine(self.checkpoint, self.options_for(choice))
        return engine, build_pipeline(engine, self.conversation or ConversationConfig(),
                                      self.checkpoint.device, stt=self.stt)


class Lease:
    """The right to run one engine on the host, until `release` (after its thread ended)."""

    def __init__(self, host: EngineHost) -> None:
        self.host = host

    def release(self, engine_stopped: bool = True) -> None:
        if not engine_stopped:
            # Its thread still runs on the model: no other conversation may start.
            self.host.stuck = "an engine thread did not stop; restart the server"
            log.error("an engine thread did not stop: the engine stays busy")
            return
        self.host._release(self)
