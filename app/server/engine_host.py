"""The server's one engine: the checkpoint, loaded once, and its single conversation slot.

A conversation takes the slot (a `Lease`) and gives it back only once its engine thread has
ended: two engines must never stream on the same model at once. Each conversation gets a
fresh DuplexEngine; the LLM side, when the server has one, is built by headless_run's
`build_pipeline`, the one place that builds it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from pathlib import Path

from app.checkpoints.loader import LoadedCheckpoint
from app.conversation.headless import ConversationConfig, build_pipeline, load_asr_model
from app.conversation.pipeline import ConversationPipeline
from app.engine.conversation_start import list_voices
from app.engine.duplex_engine import DuplexEngine, EngineOptions

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
                 conversation: ConversationConfig | None = None, stt=None) -> None:
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
        """Load the checkpoint (minutes for a 7B); blocks."""
        from app.checkpoints.catalog import get_manifest
        from app.checkpoints.loader import ensure_built, load_checkpoint, parse_dtype
        from app.engine.device import choose_device

        manifest = get_manifest(model_id)
        checkpoint = load_checkpoint(manifest, ensure_built(manifest, folder),
                                     choose_device(device), parse_dtype(dtype) if dtype else None)
        stt = None
        if conversation is not None and conversation.asr_model:
            stt = load_asr_model(conversation, checkpoint.device)  # not once per conversation
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
        engine = DuplexEngine(self.checkpoint, self.options_for(choice))
        return engine, build_pipeline(engine, self.conversation, self.checkpoint.device,
                                      stt=self.stt)


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
