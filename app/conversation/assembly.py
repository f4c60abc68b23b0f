"""Where a conversation is assembled: from a `ConversationConfig` to the checkpoint, the
engine, the speech recogniser, the LLM backend and its tools, the orchestrator, and the
pipeline that wires them. The desktop session, `run`, `serve`, `eval` and the benchmarks all
build here, so each of them gets the same conversation from the same choices.

What cannot be had is reported one of two ways: with a `notice(message, severity)` callback
(the desktop app) a missing recogniser or a bad tool setting becomes a warning and the
conversation goes on without it (typed questions still reach the LLM); without one it raises,
since a headless run asked for exactly that and should not quietly do less.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

from app.checkpoints.catalog import Manifest, Retrieval, get_manifest
from app.checkpoints.missing import CheckpointMissingError
from app.conversation.config import ConversationConfig
from app.conversation.events import ConversationEvent
from app.conversation.pipeline import ConversationPipeline
from app.conversation.precision_choice import PrecisionChoice, choose_precision
from app.engine.speech_engine import EngineOptions, SpeechEngine
from app.llm.backend import LLMBackend
from app.llm.factory import make_backend

if TYPE_CHECKING:
    # The speech model's and the recogniser's side (torch, moshi) is imported where a model
    # is loaded or an engine built, never at import: the thin client's install (a speech
    # model on a server) has none of it, and assembles its conversations here too.
    import torch

    from app.asr.asr_thread import StreamingAsr
    from app.asr.stt_catalog import LoadedStt
    from app.checkpoints.loader import LoadedCheckpoint
    from app.conversation.lock_step import LockStep
    from app.engine.row_conversation import RowConversation
    from app.orchestrator.orchestrator import Orchestrator
    from app.orchestrator.replay_clock import ReplayClock
    from app.remote.remote_engine import RemoteEngine
    from app.tools.base import ToolRegistry

Notice = Callable[[str, str], None]  # (message, severity: "info", "warning" or "error")
Device: TypeAlias = "torch.device | str"


class CheckpointStore(Protocol):
    """Keeps a loaded checkpoint between conversations (the session's CheckpointCache)."""

    def get(self, key: tuple[str, ...], load: Callable[[], LoadedCheckpoint]
            ) -> LoadedCheckpoint: ...


def load_speech_model(config: ConversationConfig, *, cache: CheckpointStore | None = None,
                      on_loading: Callable[[str], None] | None = None) -> LoadedCheckpoint:
    """The checkpoint `config` names (built first if it is a tiny one), on its device.
    `on_loading` hears what is loading when it really loads (not when `cache` has it)."""
    from app.checkpoints.loader import ensure_built, load_checkpoint, parse_dtype
    from app.engine.device import choose_device, uses_mlx
    from app.engine.torch_precision import load_torch_checkpoint

    manifest = get_manifest(config.model_id)
    folder = Path(config.custom_folder) if config.custom_folder else None
    # "auto" is planned when the model really loads: a cached one is not planned again (the
    # plan asks Ollama and the device). A precision asked for is checked at once.
    planned = (config.precision or "auto") == "auto" and config.dtype in ("", "auto")
    asked = None if planned else choose_precision(config)
    key = "auto" if asked is None else (asked.dtype or asked.precision)

    def chosen() -> PrecisionChoice:
        return asked or choose_precision(config)

    if uses_mlx(config.device):
        return _load_for_mlx(chosen, key, manifest, folder, cache, on_loading)
    device = choose_device(config.device)

    def load() -> LoadedCheckpoint:
        choice = chosen()
        precision = choice.precision
        if on_loading is not None:
            on_loading(f"Loading {manifest.display_name} on {device} "
                       f"({choice.dtype or precision}: {choice.reason})…")
        built = ensure_built(manifest, folder)
        if choice.dtype is not None:  # --dtype float16: a dtype without a precision name
            return load_checkpoint(manifest, built, device, parse_dtype(choice.dtype))
        if precision == "auto":
            return load_checkpoint(manifest, built, device)
        return load_torch_checkpoint(manifest, built, device, precision)

    if cache is None:
        return load()
    return cache.get((manifest.id, str(folder), str(device), key), load)


def _load_for_mlx(chosen: Callable[[], PrecisionChoice], key: str, manifest: Manifest,
                  folder: Path | None, cache: CheckpointStore | None,
                  on_loading: Callable[[str], None] | None) -> LoadedCheckpoint:
    """The MLX engine's checkpoint: the LM converted to MLX (or read from the converted
    weights' cache), Mimi torch on the CPU."""
    from app.checkpoints.loader import ensure_built
    from app.engine.mlx.checkpoint import load_mlx_checkpoint

    def load() -> LoadedCheckpoint:
        choice = chosen()
        precision = choice.precision
        if on_loading is not None:
            on_loading(f"Loading {manifest.display_name} on MLX ({precision}: "
                       f"{choice.reason})…")
        return load_mlx_checkpoint(manifest, ensure_built(manifest, folder), precision,
                                   on_progress=on_loading)

    if cache is None:
        return load()
    return cache.get((manifest.id, str(folder), "mlx", key), load)


def engine_options(config: ConversationConfig, **extra: Any) -> EngineOptions:
    """The engine's options from `config`; `extra`: what only a run chooses (seed,
    chunk_limit, forced_ret_frames, warmup_notice)."""
    return EngineOptions(voice=config.voice, role=config.role, user_name=config.user_name,
                         user_city=config.user_city, compile_step=config.compile_step,
                         **extra)


def build_engine(checkpoint: LoadedCheckpoint, options: EngineOptions) -> RowConversation:
    """A conversation on an engine of its own, on a loaded checkpoint (not started: the
    engine warms up when it starts): MLX's for a checkpoint loaded for MLX, else torch's."""
    from app.engine.local_engine import open_conversation

    return open_conversation(checkpoint, options)


def load_stt_model(config: ConversationConfig, device: Device) -> LoadedStt:
    """The speech recogniser's model (built first if it is a tiny one), to share across
    conversations: loading it is slow."""
    from app.asr.stt_catalog import ensure_stt_built, get_stt_manifest, load_stt

    manifest = get_stt_manifest(config.stt_model)
    return load_stt(manifest, ensure_stt_built(manifest), device)


def build_asr(config: ConversationConfig, device: Device, *, stt: LoadedStt | None = None,
              notice: Notice | None = None, **options: Any) -> StreamingAsr | None:
    """The streaming recogniser, or None without one. `stt`: its model, already loaded;
    `options`: AsrOptions fields to pin (a benchmark's VAD hang). None too when the speech
    server recognises the words (`stt_model` "server": the remote engine gives them)."""
    if not config.has_stt or config.stt_on_server:
        return None
    try:
        from app.asr.asr_thread import AsrOptions
        from app.asr.recogniser import open_recognition

        return open_recognition(stt if stt is not None else load_stt_model(config, device),
                                AsrOptions(force_vad=config.force_vad, **options))
    except CheckpointMissingError:  # the app offers the download when Start is pressed
        if notice is None:
            raise
        notice(f"Speech recognition is off: {config.stt_model} is not on disk. Typed "
               "questions still reach the LLM; press Start again to download it, or choose "
               "\"None (typed questions only)\" in Settings.", "warning")
    except Exception as exc:  # speech recognition is optional: typing still reaches the LLM
        if notice is None:
            raise
        notice(f"Speech recognition is off ({exc}); typed questions still reach the LLM.",
               "warning")
    return None


def build_tools(config: ConversationConfig, notice: Notice | None = None) -> ToolRegistry:
    """The tools the LLM may call: the built-in ones and the MCP servers' (leased until the
    registry is closed). A setting they refuse (e.g. a folder that is gone, a server that
    does not start) is a notice, with `notice`; an error without."""
    from app.tools.default_tools import ToolSettings, build_tools
    from app.tools.mcp.offer import add_mcp_servers

    try:
        registry = build_tools(ToolSettings(enabled=config.tools,
                                            local_folders=config.search_folders))
    except ValueError as exc:
        if notice is None:
            raise
        notice(f"Tools are off: {exc}", "warning")
        registry = build_tools(ToolSettings(enabled=()))
    add_mcp_servers(registry, config.mcp_servers, notice)  # the user's MCP servers' tools
    return registry


def build_backend(config: ConversationConfig, flag: str = "--llm-host") -> LLMBackend:
    """The LLM backend `config` names; ValueError for an unknown one or an
    OpenAI-compatible server without its URL (`flag`: where the user gives it)."""
    return make_backend(config.backend, config.host or None, config.model or None,
                        timeout_s=config.timeout_s, flag=flag)


def build_orchestrator(config: ConversationConfig, engine: SpeechEngine[ConversationEvent],
                       backend: LLMBackend, tools: ToolRegistry, *,
                       replay: ReplayClock | None = None,
                       **options: Any) -> Orchestrator:
    """The LLM side over `engine` (this machine's, or a server's).
    `replay`: a file's run, the LLM's latency replayed in frames on this clock (a pipeline
    fed in lock-step); None, a live conversation;
    `options`: OrchestratorOptions fields to pin (a benchmark's turn rules)."""
    from app.orchestrator.orchestrator import Orchestrator, OrchestratorOptions
    from app.orchestrator.retrieval import user_profile
    from app.orchestrator.span_budget import span_chars

    facts = engine.facts()
    retrieval: Retrieval | None = facts.retrieval
    if retrieval is not None and config.ret_deadline_s is not None:
        retrieval = replace(retrieval, deadline_s=config.ret_deadline_s)
    # The profile is the engine's own: a server's client may have named someone else at
    # its start. Keep answers inside the injector's span budget (already measured when the LLM is
    # turned on mid-conversation: 0 until the engine is ready).
    return Orchestrator(backend, tools, engine, OrchestratorOptions(
        max_span_chars=span_chars(facts.max_span_tokens), retrieval=retrieval,
        span_tokens=engine.span_tokens, profile=user_profile(facts.user_name, facts.user_city),
        **options), replay_clock=replay)


REACH_TIMEOUT_S = 10.0  # for the first plain connection to the speech server


def connect_remote(config: ConversationConfig, connect_timeout_s: float,
                   cancel: threading.Event | None = None, *,
                   for_file: bool = False, where: str = "") -> RemoteEngine | None:
    """The speech model of `config.server`, connected (its `ready` heard), with what the
    conversation starts with: the voice, persona and the user's profile, and whether the
    server recognises the user's words. None: `cancel` was set meanwhile. `for_file`: a
    file's frames (never dropped; a lost connection ends the run). `where`: where the user
    gives the server's address, named when nothing answers there. Raises
    RemoteEngineError with the reason the server cannot be used: nothing at its address is
    said in words first (app/conversation/server_reach.py), not as the network library's."""
    from app.conversation.server_reach import reach_problem
    from app.remote.remote_engine import MAX_LAG_S, RemoteEngine, RemoteEngineError, RemoteOptions

    server = config.server
    if server is None:
        raise ValueError("the conversation's speech model is not on a server")
    problem = reach_problem(server.url, min(connect_timeout_s, REACH_TIMEOUT_S), where)
    if problem is not None:
        raise RemoteEngineError(problem)
    engine = RemoteEngine(RemoteOptions(
        url=server.url, token=server.token, connect_timeout_s=connect_timeout_s,
        voice=config.voice, role=config.role, user_name=config.user_name,
        user_city=config.user_city, asr_on_server=config.stt_on_server,
        max_lag_s=None if for_file else MAX_LAG_S, reconnect=not for_file))
    return engine if engine.connect(cancel=cancel) else None


def build_pipeline(engine: SpeechEngine[ConversationEvent], config: ConversationConfig,
                   device: Device, *,
                   lock_step: LockStep | None = None, stt: LoadedStt | None = None,
                   asr: StreamingAsr | None = None,
                   backend: LLMBackend | None = None, notice: Notice | None = None,
                   live: bool = False, host_flag: str = "--llm-host") -> ConversationPipeline:
    """The whole conversation around `engine`, not started. `lock_step`: a file's run, fed
    in lock-step, the LLM's latency replayed as frames on its clock (None: live); `stt`:
    the recogniser's model, already loaded;
    `asr`: the conversation's recognition, already made (a row of a server's shared
    recogniser), instead of one of its own; `backend`: an LLM backend to ask instead of
    `config.backend`'s; `notice`: see the module's docstring; `live`: a conversation
    whose levelling Settings can switch; `host_flag`: where the user gives the LLM
    server's address (for the error)."""
    orchestrator = None
    if config.has_llm or backend is not None:
        if backend is None:
            try:
                backend = build_backend(config, host_flag)
            except ValueError as exc:
                if notice is None:
                    raise
                notice(f"The assistant (LLM) is off: {exc}", "warning")
        if backend is not None:
            orchestrator = build_orchestrator(config, engine, backend,
                                              build_tools(config, notice),
                                              replay=lock_step.clock if lock_step else None)
    if asr is None:
        asr = build_asr(config, device, stt=stt, notice=notice)
    return join_stages(engine, config, asr, orchestrator, lock_step=lock_step, live=live)


def join_stages(engine: SpeechEngine[ConversationEvent], config: ConversationConfig,
                asr: StreamingAsr | None,
                orchestrator: Orchestrator | None, *, lock_step: LockStep | None = None,
                live: bool = False) -> ConversationPipeline:
    """The pipeline over stages already built. A live conversation always has the
    levelling stage (Settings switches it on and off while it runs); a run has it only
    when it levels."""
    leveller = config.level_voice if live else (True if config.level_voice else None)
    return ConversationPipeline(engine, asr, orchestrator, leveller,
                                lock_step=lock_step if orchestrator is not None else None)
