"""The settings schema. Every key the app persists is a field here (one place, typed).

Frozen dataclasses: a changed setting is a new object, handed to whoever needs it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from app.llm_backends import OLLAMA, LlmBackendName

# 2: speech.precision replaced speech.dtype and speech.quantize; 3: the MCP servers (mcp)
SCHEMA_VERSION = 3

EchoMode = Literal["cancel", "headset"]  # "cancel": WebRTC echo cancellation; "headset": off
EngineMode = Literal["local", "server"]  # the speech model on this computer, or a server's
# The speech model's weights (app/engine/precision.py says which device runs which): auto
# (the best that fits by the memory plan), fp32, bf16, int8, fp8 and int4 (torch; fp8 on NVIDIA
# GPUs that have it), q8 and q4 (MLX).
Precision = Literal["auto", "fp32", "bf16", "int8", "fp8", "int4", "q8", "q4"]
# May a server's tool that changes things (MCP's destructiveHint, or no readOnlyHint) run?
# "ask": the window asks each time; "always": it runs; "never": it is refused.
McpConsent = Literal["ask", "always", "never"]


@dataclass(frozen=True)
class SpeechModelSettings:
    model_id: str = "moshika"  # catalog id (models/*.json)
    custom_folder: str | None = None  # a local checkpoint folder instead of the catalog's
    device: str = "auto"  # auto, cuda, mps, cpu, mlx (the MLX engine)
    precision: Precision = "auto"
    voice: str | None = None  # persona checkpoints: voice prompt name
    role: str | None = None  # persona checkpoints: role prompt (None: the manifest's)
    # Checkpoints trained on them (context-spanning-7b): the persona says who and where
    # the user is, and the retrieval LLM fills places and time zones from them.
    user_name: str | None = None
    user_city: str | None = None


# What PortAudio names the system default device on Linux (ALSA's "default"): the same
# device as a saved name of None, so the lists offer it once, as the system default.
SYSTEM_DEFAULT_ALIASES = ("default",)


@dataclass(frozen=True)
class AudioSettings:
    input_device: str | None = None  # device name; None: the system default
    output_device: str | None = None
    echo_mode: EchoMode = "cancel"
    # Level the microphone to -24 LUFS (noise gate, smoothed gain, limiter) before the
    # speech model and the recogniser hear it: the loudness PersonaPlex-family models
    # were trained on.
    level_voice: bool = True


@dataclass(frozen=True)
class LlmSettings:
    backend: LlmBackendName = OLLAMA
    host: str = "http://127.0.0.1:11434"  # Ollama host, or an OpenAI-compatible base URL
    model: str = ""  # picked from the server's own list in the settings dialog
    # seconds; a value outside the range makes every turn fail (or wait forever)
    timeout_s: float = field(default=30.0, metadata={"range": (0.5, 600.0)})
    tools_enabled: bool = True
    tools: tuple[str, ...] = ("web_search", "web_fetch", "local_search", "calculator", "clock")
    search_folders: tuple[str, ...] = ()  # the only folders local_search may read
    stt_model: str = "kyutai-stt-1b-en_fr"  # models/stt id; "none": no speech recognition
    end_of_turn: str = "auto"  # "auto": the STT's own signal where it has one; "vad": always


@dataclass(frozen=True)
class EngineSettings:
    """Where the speech model runs. "server": `python main.py serve` on another machine;
    the LLM side stays on this one (app/remote/remote_engine.py), speech recognition too
    unless `asr_on_server`."""

    mode: EngineMode = "local"
    server_url: str = "http://127.0.0.1:8998"
    server_token: str = ""  # the server's shared secret; "": it has none
    # seconds for each connection attempt (the server warms its engine up before `ready`)
    connect_timeout_s: float = field(default=30.0, metadata={"range": (1.0, 300.0)})
    # The server's recogniser (`serve --asr`) hears the user, not one on this computer: the
    # thin client's install has none, and a laptop CPU cannot run the STT in real time.
    asr_on_server: bool = False


@dataclass(frozen=True)
class McpServerSettings:
    """One Model Context Protocol server, as a Claude-Desktop `mcpServers` entry gives it:
    `command`/`args`/`env` start a stdio server, `url`/`headers` reach a streamable-HTTP one
    (app/tools/mcp/servers_file.py reads and writes that format).

    `env` and `headers` are "NAME=value" and "Name: value" lines: their values are secrets
    (API keys, tokens) that the app never logs nor writes to a transcript."""

    name: str = ""  # unique among the servers; its tools are told apart by it
    enabled: bool = True
    command: str = ""  # stdio: the program (npx, uvx, python, ...); "" for an HTTP server
    args: tuple[str, ...] = ()
    env: tuple[str, ...] = ()  # "NAME=value": set for the server's process only
    url: str = ""  # streamable HTTP: the server's endpoint; "" for a stdio server
    headers: tuple[str, ...] = ()  # "Name: value", e.g. "Authorization: Bearer ..."
    consent: McpConsent = "ask"
    disabled_tools: tuple[str, ...] = ()  # the server's own tool names not offered to the LLM
    # seconds one tool call may take (a server that hangs is given up on after it)
    timeout_s: float = field(default=30.0, metadata={"range": (1.0, 600.0)})

    @property
    def transport(self) -> Literal["stdio", "http"]:
        return "http" if self.url and not self.command else "stdio"


@dataclass(frozen=True)
class McpSettings:
    """The user's MCP servers (Settings → Tools); their tools sit beside the built-in ones."""

    servers: tuple[McpServerSettings, ...] = ()


@dataclass(frozen=True)
class AppSettings:
    version: int = SCHEMA_VERSION
    speech: SpeechModelSettings = field(default_factory=SpeechModelSettings)
    audio: AudioSettings = field(default_factory=AudioSettings)
    llm: LlmSettings = field(default_factory=LlmSettings)
    engine: EngineSettings = field(default_factory=EngineSettings)
    mcp: McpSettings = field(default_factory=McpSettings)
