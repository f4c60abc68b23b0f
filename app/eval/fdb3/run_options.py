"""What `eval fdb3 run` is asked: its flags, declared on Fdb3RunOptions' fields
(app/command_options.py). Apart from run.py, which loads the MCP server, so that the
`eval` parsers are built without it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from app.command_options import cli_option
from app.conversation.config import ConversationConfig
from app.eval.fdb.layout import PROFILE_CITY, REFERENCE_SEED
from app.eval.fdb3.layout import DEFAULT_CHUNK_LIMIT, DEFAULT_STT, check_provider
from app.eval.fdb3.mock_apis import LATENCY_PROFILES
from app.llm_backends import LLM_BACKEND_NAMES, OLLAMA

TAIL_S = 6.0  # silence after the input: the reference's
STANDIN = "standin"
# A sample's conversation unless the command line says otherwise: the tiny demo model, the
# 1B recogniser, the reference's profile city.
FDB3_CONVERSATION = ConversationConfig(model_id="tiny", stt_model=DEFAULT_STT,
                                       user_city=PROFILE_CITY)
# The parts of `eval fdb3 run`'s --help its own options stand in (the others stand first).
SPEECH_MODEL, LLM_SIDE = "model", "llm"


@dataclass(frozen=True)
class Fdb3RunOptions:
    provider: str = field(metadata=cli_option(
        "--provider", required=True,
        help="names the results (result_<provider>.json), e.g. contextspan"))
    # The speech model and the LLM side; its backend and host are `llm`'s when that is the
    # stand-in, and the benchmark's tools are its only ones.
    conversation: ConversationConfig = FDB3_CONVERSATION
    force: bool = field(default=False, metadata=cli_option(
        "--force", help="run samples already done again"))
    limit: int = field(default=0, metadata=cli_option(
        "--limit", help="the first N samples (default all)"))
    benchmark: Path | None = field(default=None, metadata=cli_option(
        "--benchmark", metavar="JSON",
        help="the benchmark's benchmark_data_v2.json (scenarios by id)"))
    seed: int | None = field(default=REFERENCE_SEED, metadata=cli_option(
        "--seed", section=SPEECH_MODEL,
        help=f"one seed for every sample (default {REFERENCE_SEED}, the reference's)"))
    # random-weight <ret> checkpoints never ask
    force_ret_after_s: float | None = field(default=None, metadata=cli_option(
        "--force-ret-after", section=SPEECH_MODEL, metavar="SECONDS",
        help="force the model's <ret> this long after the user stops (random-weight <ret> "
             "checkpoints never ask on their own)"))
    tail_s: float = field(default=TAIL_S, metadata=cli_option(
        "--tail", section=SPEECH_MODEL, metavar="SECONDS",
        help="silence after the input, for the answer (default 6, the reference's)"))
    timeout_s: float = field(default=3600.0, metadata=cli_option(
        "--timeout", section=SPEECH_MODEL, metavar="SECONDS",
        help="longest a sample may take"))
    chunk_limit: int = field(default=DEFAULT_CHUNK_LIMIT, metadata=cli_option(
        "--chunk-limit", section=SPEECH_MODEL, metavar="N",
        help="span positions injected between two frames, fixed so that a run is the same on "
             f"any machine (default {DEFAULT_CHUNK_LIMIT}; a live conversation measures it)"))
    # an LLM backend (app/llm_backends.py) or "standin" (the demo's plans)
    llm: str = field(default=OLLAMA, metadata=cli_option(
        "--llm", section=LLM_SIDE, choices=(*LLM_BACKEND_NAMES, STANDIN),
        help="the LLM that calls the tools; standin: the stand-in Ollama plays the demo "
             "samples' own calls (make-demo)"))
    # the mock APIs' profile, unless a scenario names its own
    latency: str = field(default="instant", metadata=cli_option(
        "--latency", section=LLM_SIDE, choices=LATENCY_PROFILES,
        help="the mock APIs' latency (default instant; a scenario's own latency_profile "
             "wins)"))
    system_prompt: Path | None = field(default=None, metadata=cli_option(
        "--system-prompt", section=LLM_SIDE, metavar="FILE",
        help="the agent's instructions (default: ours, app/eval/fdb3/prompts/agent.txt)"))

    def check(self) -> None:
        check_provider(self.provider)
        if self.llm not in (*LLM_BACKEND_NAMES, STANDIN):
            raise ValueError(f"--llm {self.llm!r}: {', '.join(LLM_BACKEND_NAMES)} or {STANDIN}")
        if self.latency not in LATENCY_PROFILES:
            raise ValueError(f"--latency must be one of {', '.join(LATENCY_PROFILES)}")
        if not 0 <= self.tail_s <= 60:
            raise ValueError("--tail must be from 0 to 60 seconds")
        if self.limit < 0:
            raise ValueError("--limit must be 0 (all) or more")
        if not self.timeout_s > 0:
            raise ValueError("--timeout must be more than 0 seconds")
        if self.chunk_limit < 1:
            raise ValueError("--chunk-limit must be at least 1")
