"""What a conversation is made of, in one frozen object: the speech model, the speech
recogniser, the LLM side and its tools, the input's levelling.

The desktop app builds it from the saved settings (`from_settings`: each field that
declares where it is saved, `saved_as`, is read from there); `run`, `serve`, `eval` and the
benchmarks build it from their arguments. Field names are the settings' own
(`app.settings.schema`), so one thing has one name wherever it is chosen. The audio devices
and the echo mode are not here: they belong to the desktop's audio, not to the conversation
(app/conversation/saved_settings.py's NOT_A_CONVERSATIONS lists them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from app.conversation.options import (
    CONVERSATION_COMMANDS,
    EVAL_FDB,
    EVAL_FDB3,
    EVAL_QA,
    LLM_SIDE,
    RUN,
    SERVE,
    SPEECH,
    as_str,
    as_tuple,
    cli_option,
    every_command_but,
    tool_names,
    when_set,
)
from app.conversation.saved_settings import saved_as, saved_values
from app.engine.precision import PRECISION_CHOICES, PRECISION_HELP  # light: no torch
from app.llm_backends import LLM_BACKEND_NAMES, NO_LLM
from app.settings.schema import AppSettings, EngineSettings, LlmSettings, McpServerSettings
from app.tools.mcp.servers_file import MCP_CONFIG_HELP, servers_for_option

NONE = NO_LLM  # `backend` and `stt_model`: no LLM side, no speech recognition
# `stt_model`: the speech server's recogniser (`serve --asr`) transcribes the conversation
# and its words reach the LLM side here as a local recogniser's do (app/remote).
SERVER_STT = "server"


@dataclass(frozen=True)
class SpeechServer:
    """A speech model on another machine (`python main.py serve`): its address and token."""

    url: str
    token: str | None = None


@dataclass(frozen=True)
class ConversationConfig:
    """Each field a command line chooses declares its option here (`cli_option`: flags,
    help, type, choices, the commands that offer it and its part of their help): `run`,
    `serve`, `eval qa`, `eval fdb` and `eval fdb3 run` build their arguments from these
    declarations and read them back with one function (app/conversation/options.py).
    Each field the desktop app saves declares where beside it (`saved_as("group.field")`,
    app/conversation/saved_settings.py): `from_settings` reads it from there."""

    # The speech model (SpeechModelSettings).
    model_id: str = field(default="moshika", metadata=cli_option(  # catalog id (models/*.json)
        "--model", help="catalog id (python main.py models)", default="tiny",
        commands=CONVERSATION_COMMANDS, part=SPEECH)
        | saved_as("speech.model_id"))
    # a local checkpoint folder instead of the catalog's
    custom_folder: str | None = field(default=None, metadata=cli_option(
        "--folder", help="checkpoint folder to load", type=Path, to_field=as_str,
        commands=CONVERSATION_COMMANDS, part=SPEECH)
        | saved_as("speech.custom_folder"))
    # auto, cuda, mps, cpu, mlx (the MLX engine; Apple Silicon's auto)
    device: str = field(default="auto", metadata=cli_option(
        "--device", help="cuda, mps or cpu (default: best found)",
        commands=CONVERSATION_COMMANDS, part=SPEECH)
        | saved_as("speech.device"))
    # The run's and the server's --dtype (auto: the manifest's, bfloat16, float16, float32);
    # the settings choose `precision` instead.
    dtype: str = field(default="auto", metadata=cli_option(
        "--dtype", help="the weights' dtype (default: the checkpoint's)",
        choices=("float32", "bfloat16", "float16"), commands=CONVERSATION_COMMANDS,
        part=SPEECH))
    # auto (the best that fits by the memory plan), fp32, bf16, int8, fp8, int4 (torch), q8 and
    # q4 (MLX, device "mlx"): app/engine/precision.py
    precision: str = field(default="auto", metadata=cli_option(
        "--precision", help=PRECISION_HELP, choices=tuple(PRECISION_CHOICES),
        commands=(RUN, SERVE), part=SPEECH)
        | saved_as("speech.precision"))
    # The torch engine's step compiled by torch.compile at warm-up (EngineOptions.compile_step,
    # app/engine/step_compile.py): off unless asked, a first start compiling for minutes.
    compile_step: bool = field(default=False, metadata=cli_option(
        "--compile", help="compile the speech model's step with torch.compile at start-up: "
                          "fewer, bigger kernels (a first start compiles for a minute or more; "
                          "later ones read the data dir's cache)",
        commands=(RUN,), part=SPEECH))
    # persona checkpoints: voice prompt name (or file)
    voice: str | None = field(default=None, metadata=cli_option(
        "--voice", help="voice prompt: a name from the checkpoint's voices, or a file (Mimi "
                        "codes .pt or a recording) (persona checkpoints)",
        commands=CONVERSATION_COMMANDS, part=SPEECH)
        | saved_as("speech.voice"))
    # persona checkpoints: role prompt (None: the manifest's). `eval fdb` gives the
    # benchmark's prompts.
    role: str | None = field(default=None, metadata=cli_option(
        "--role", "--persona", help="persona text (persona checkpoints; default: the "
                                    "manifest's)",
        commands=every_command_but(EVAL_FDB), part=SPEECH)
        | saved_as("speech.role"))
    # who and where the user is, for checkpoints trained on it
    user_name: str | None = field(default=None, metadata=cli_option(
        "--user-name", help="your name, for checkpoints trained on it (context-spanning-7b)",
        commands=CONVERSATION_COMMANDS, part=SPEECH)
        | saved_as("speech.user_name"))
    user_city: str | None = field(default=None, metadata=cli_option(
        "--user-city", help="your city, for checkpoints trained on it (context-spanning-7b)",
        commands=CONVERSATION_COMMANDS, part=SPEECH)
        | saved_as("speech.user_city"))
    # The LLM side (LlmSettings), its speech recognition first. The defaults are a speech
    # model alone.
    # models/stt id; "none": no speech recognition; "server": the speech server's (with
    # `server` only)
    stt_model: str = field(default=NONE, metadata=cli_option(
        "--asr", help="recognise the speech with this STT (e.g. tiny-stt); with `run "
                      "--server`, 'server': the speech server's", metavar="STT_MODEL",
        commands=CONVERSATION_COMMANDS, part=LLM_SIDE))
    # "auto": the STT's own signal where it has one; "vad": always
    end_of_turn: str = field(default="auto", metadata=cli_option(
        "--vad", help="end turns by voice activity even if the STT has its own signal",
        kind="flag", to_field=when_set("vad", "auto"), commands=CONVERSATION_COMMANDS,
        part=LLM_SIDE) | saved_as("llm.end_of_turn"))
    # `eval fdb3` has its own --llm (its demo's stand-in is one more choice).
    backend: str = field(default=NO_LLM, metadata=cli_option(  # app/llm_backends.py
        "--llm", help="ask this LLM backend and inject its findings",
        choices=LLM_BACKEND_NAMES, commands=every_command_but(EVAL_FDB3), part=LLM_SIDE)
        | saved_as("llm.backend"))
    # Ollama host or OpenAI-compatible base URL; "": Ollama's default
    host: str = field(default="", metadata=cli_option(
        "--llm-host", help="Ollama host (default $OLLAMA_HOST or http://127.0.0.1:11434) or "
                           "an OpenAI-compatible base URL",
        commands=CONVERSATION_COMMANDS, part=LLM_SIDE)
        | saved_as("llm.host"))
    model: str = field(default="", metadata=cli_option(  # the LLM; "": the backend's default
        "--llm-model", help="the LLM (default: the backend's)",
        commands=CONVERSATION_COMMANDS, part=LLM_SIDE) | saved_as("llm.model"))
    timeout_s: float = field(default=30.0, metadata=cli_option(  # the LLM's longest silence
        "--llm-timeout", help="the LLM's longest silence", metavar="SECONDS",
        commands=CONVERSATION_COMMANDS, part=LLM_SIDE) | saved_as("llm.timeout_s"))
    # None: every configured tool; (): none. `eval fdb3`'s tools are the benchmark's.
    tools: tuple[str, ...] | None = field(default=None, metadata=cli_option(
        "--tools", help="comma-separated tools (default: all configured): web_search, "
                        "web_fetch, local_search, calculator, clock; 'none' for none",
        to_field=tool_names, commands=every_command_but(EVAL_FDB3), part=LLM_SIDE))
    # The <ret> deadline in seconds (None: the checkpoint's, 2.5 s); the reference's QA
    # benchmark allows 10 s.
    ret_deadline_s: float | None = field(default=None, metadata=cli_option(
        "--ret-deadline", help="drop a span landing later than this after its <ret> (2.5 "
                               "is the live app's)", metavar="SECONDS",
        commands=(EVAL_QA, EVAL_FDB3), part=LLM_SIDE))
    # the only folders local_search may read
    search_folders: tuple[str, ...] = field(default=(), metadata=cli_option(
        "--folder-search", help="a folder local_search may read (repeatable)", kind="list",
        metavar="DIR", to_field=as_tuple, commands=(RUN, SERVE, EVAL_FDB), part=LLM_SIDE)
        | saved_as("llm.search_folders", convert=tuple))
    # The user's MCP servers, whose tools join the built-in ones (Settings → Tools; `run`
    # and `serve --mcp-config FILE` read a Claude-Desktop mcpServers file into it with
    # app/tools/mcp/servers_file.py's read_servers_file).
    mcp_servers: tuple[McpServerSettings, ...] = field(default=(), metadata=cli_option(
        "--mcp-config", help=MCP_CONFIG_HELP, type=Path, metavar="FILE",
        to_field=lambda path, chosen: servers_for_option(
            path, chosen.get("backend", NO_LLM) != NO_LLM), commands=(RUN, SERVE),
        part=LLM_SIDE) | saved_as("mcp.servers"))
    # Headless runs: feed the input at 80 ms a frame, like a microphone (else as fast as it
    # goes, the LLM's latency replayed in frames). A live conversation is real time anyway.
    realtime: bool = field(default=False, metadata=cli_option(
        "--realtime", help="feed the input at real-time pace, like a microphone (default with "
                           "an LLM: as fast as the machine allows, the LLM's latency replayed "
                           "in frames)", kind="flag", commands=(RUN,), part=LLM_SIDE))
    # The input (AudioSettings.level_voice): levelled to -24 LUFS before the model and the
    # recogniser hear it.
    level_voice: bool = field(default=False, metadata=cli_option(
        "--level-voice", help="level the input to -24 LUFS (noise gate, gain, limiter) before "
                              "the model and the ASR hear it, as the app does live",
        kind="flag", commands=(RUN, SERVE, EVAL_FDB), part=LLM_SIDE)
        | saved_as("audio.level_voice"))
    # The speech model on a server (Settings → Speech engine, `run --server`); None: this
    # computer's. (`run --server URL --server-token TOKEN`: two flags, one field.)
    server: SpeechServer | None = None

    @classmethod
    def from_settings(cls, settings: AppSettings) -> ConversationConfig:
        """The desktop conversation the saved settings describe. Every field declaring
        `saved_as` is read from its saved setting (app/conversation/saved_settings.py); the
        three below are derived by hand, each from more than one saved setting."""
        llm, engine = settings.llm, settings.engine
        return cls(
            **saved_values(cls, settings),
            # llm.stt_model, llm.backend and the engine's mode and asr_on_server
            stt_model=_desktop_stt_model(llm, engine),
            # llm.tools, unless llm.tools_enabled is off: then none
            tools=tuple(llm.tools) if llm.tools_enabled else (),
            # the engine's mode, server_url and server_token (pasted, maybe with spaces)
            server=SpeechServer(engine.server_url.strip(), engine.server_token.strip() or None)
            if engine.mode == "server" else None)

    @property
    def has_llm(self) -> bool:
        return bool(self.backend) and self.backend != NONE

    @property
    def has_stt(self) -> bool:
        return bool(self.stt_model) and self.stt_model != NONE

    @property
    def stt_on_server(self) -> bool:
        """The speech server recognises the user's words (no recogniser here)."""
        return self.stt_model == SERVER_STT

    @property
    def force_vad(self) -> bool:
        """End turns by voice activity even if the STT has an end-of-speech head."""
        return self.end_of_turn == "vad"


def _desktop_stt_model(llm: LlmSettings, engine: EngineSettings) -> str:
    """Speech recognition feeds the LLM side only: without an LLM backend there is none
    (turning the LLM on brings it at the next start, see `restart_needed`). With the speech
    model on a server that recognises (`asr_on_server`), the server's."""
    if llm.backend == NONE:
        return NONE
    if engine.mode == "server" and engine.asr_on_server and llm.stt_model != NONE:
        return SERVER_STT
    return llm.stt_model
