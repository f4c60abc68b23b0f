"""What a conversation is made of, in one frozen object: the speech model, the speech
recogniser, the LLM side and its tools, the input's levelling.

The desktop app builds it from the saved settings (`from_settings`); `run`, `serve`, `eval`
and the benchmarks build it from their arguments. Field names are the settings' own
(`app.settings.schema`), so one thing has one name wherever it is chosen. The audio devices
and the echo mode are not here: they belong to the desktop's audio, not to the conversation.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.settings.schema import AppSettings, McpServerSettings

NONE = "none"  # `backend` and `stt_model`: no LLM side, no speech recognition
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
    # The speech model (SpeechModelSettings).
    model_id: str = "moshika"  # catalog id (models/*.json)
    custom_folder: str | None = None  # a local checkpoint folder instead of the catalog's
    device: str = "auto"  # auto, cuda, mps, cpu, mlx (the MLX engine; Apple Silicon's auto)
    # The run's and the server's --dtype (auto: the manifest's, bfloat16, float16, float32);
    # the settings choose `precision` instead.
    dtype: str = "auto"
    # auto (the best that fits by the memory plan), fp32, bf16, int8 and fp8 (torch), q8 and
    # q4 (MLX, device "mlx"): app/engine/precision.py
    precision: str = "auto"
    voice: str | None = None  # persona checkpoints: voice prompt name (or file)
    role: str | None = None  # persona checkpoints: role prompt (None: the manifest's)
    user_name: str | None = None  # who and where the user is, for checkpoints trained on it
    user_city: str | None = None
    # The LLM side (LlmSettings). The defaults are a speech model alone.
    backend: str = NONE  # "ollama", "openai" or "none"
    host: str = ""  # Ollama host or OpenAI-compatible base URL; "": Ollama's default
    model: str = ""  # the LLM; "": the backend's default
    timeout_s: float = 30.0  # the LLM's longest silence
    tools: tuple[str, ...] | None = None  # None: every configured tool; (): none
    search_folders: tuple[str, ...] = ()  # the only folders local_search may read
    # The user's MCP servers, whose tools join the built-in ones (Settings → Tools; `run`
    # and `serve --mcp-config FILE` read a Claude-Desktop mcpServers file into it with
    # app/tools/mcp/servers_file.py's read_servers_file).
    mcp_servers: tuple[McpServerSettings, ...] = ()
    # models/stt id; "none": no speech recognition; "server": the speech server's (with
    # `server` only)
    stt_model: str = NONE
    end_of_turn: str = "auto"  # "auto": the STT's own signal where it has one; "vad": always
    # The <ret> deadline in seconds (None: the checkpoint's, 2.5 s); the reference's QA
    # benchmark allows 10 s.
    ret_deadline_s: float | None = None
    # The input (AudioSettings.level_voice): levelled to -24 LUFS before the model and the
    # recogniser hear it.
    level_voice: bool = False
    # Headless runs: feed the input at 80 ms a frame, like a microphone (else as fast as it
    # goes, the LLM's latency replayed in frames). A live conversation is real time anyway.
    realtime: bool = False
    # The speech model on a server (Settings → Speech engine, `run --server`); None: this
    # computer's.
    server: SpeechServer | None = None

    @classmethod
    def from_settings(cls, settings: AppSettings) -> ConversationConfig:
        """The desktop conversation the saved settings describe. Speech recognition feeds
        the LLM side only: without an LLM backend there is none (turning the LLM on brings
        it at the next start, see `restart_needed`)."""
        speech, llm, engine = settings.speech, settings.llm, settings.engine
        on_server = engine.mode == "server"
        stt_model = llm.stt_model if llm.backend != NONE else NONE
        if on_server and engine.asr_on_server and stt_model != NONE:
            stt_model = SERVER_STT
        return cls(
            model_id=speech.model_id, custom_folder=speech.custom_folder, device=speech.device,
            precision=speech.precision, voice=speech.voice, role=speech.role,
            user_name=speech.user_name, user_city=speech.user_city,
            backend=llm.backend, host=llm.host, model=llm.model, timeout_s=llm.timeout_s,
            tools=tuple(llm.tools) if llm.tools_enabled else (),
            search_folders=tuple(llm.search_folders), mcp_servers=settings.mcp.servers,
            stt_model=stt_model, end_of_turn=llm.end_of_turn,
            level_voice=settings.audio.level_voice,
            server=SpeechServer(engine.server_url.strip(), engine.server_token.strip() or None)
            if on_server else None)

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
