"""What each `python main.py bench KIND` is asked: one frozen dataclass per benchmark, its
flags declared on its fields (app/command_options.py). The `bench` parsers are derived from
them (`BENCHMARKS`, app/cli/main.py) and each benchmark is handed one typed request.

Light to import: every parser is built at start; the benchmarks themselves load torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.command_options import cli_option
from app.engine.precision import MLX_PRECISIONS  # light: no torch

JOINS_TOKEN = "bench-joins"  # the token of the server `bench joins` starts (joins_bench.py)


def _json() -> Any:
    """The `--json` field most benchmarks have."""
    return field(default=False, metadata=cli_option("--json", help="print one JSON object"))


@dataclass(frozen=True)
class InjectionBench:
    model: str = field(default="tiny", metadata=cli_option(
        "--model", help="catalog id (python main.py models)"))
    device: str | None = field(default=None, metadata=cli_option(
        "--device", help="cuda, mps, cpu, or mlx: the MLX engine (default: best found; mlx on "
                         "Apple Silicon where it is installed)"))
    dtype: str | None = field(default=None, metadata=cli_option(
        "--dtype", choices=("float32", "bfloat16", "float16")))
    precision: str | None = field(default=None, metadata=cli_option(
        "--precision", choices=MLX_PRECISIONS,
        help="with --device mlx: the MLX LM's weights (default: fp32 on a CPU, bf16 on Apple "
             "Silicon's GPU); torch takes --dtype"))
    k: tuple[int, ...] | None = field(default=None, metadata=cli_option(  # None: 16, 64, 256
        "--k", kind="list", help="K values (default 16, 64, 256)"))
    repeats: int = field(default=7, metadata=cli_option("--repeats"))
    no_wrap: bool = field(default=False, metadata=cli_option(
        "--no-wrap", help="skip the check after the context window wraps"))
    json: bool = _json()


@dataclass(frozen=True)
class EngineBench:
    models: tuple[str, ...] | None = field(default=None, metadata=cli_option(
        "--model", kind="list", help="speech model (repeatable; default tiny and tiny-cs)"))
    frames: int = field(default=200, metadata=cli_option("--frames"))
    rounds: int = field(default=3, metadata=cli_option("--rounds"))
    baseline_tree: Path | None = field(default=None, metadata=cli_option(
        "--baseline-tree", metavar="DIR",
        help="another checkout of ContextSpan, measured in the same run"))
    json: bool = _json()


@dataclass(frozen=True)
class StepBench:
    models: tuple[str, ...] | None = field(default=None, metadata=cli_option(
        "--model", kind="list",
        help="catalog id (tiny-cs), or 7b: the 7B architecture with random weights, at a small "
             "width on a CPU and in full on CUDA (repeatable; default tiny-cs and 7b)"))
    device: str = field(default="cpu", metadata=cli_option(
        "--device", help="cpu (default) or cuda"))
    precision: str | None = field(default=None, metadata=cli_option(
        "--precision", metavar="LIST",
        help="comma-separated precisions counted one after the other (fp32, bf16, int8, fp8, "
             "int4; default fp32 on a CPU, bf16 on CUDA)"))
    steps: int = field(default=2, metadata=cli_option(
        "--steps", help="steps counted (default 2)"))
    greedy: bool = field(default=False, metadata=cli_option(
        "--greedy", help="greedy tokens (default: sampled, as the app samples)"))
    compile_step: bool = field(default=False, metadata=cli_option(
        "--compile", help="also count ours with the step compiled by torch.compile (a first "
                          "run compiles for minutes)"))
    json: bool = _json()


@dataclass(frozen=True)
class AsrBench:
    stt: str = field(default="tiny-stt", metadata=cli_option(
        "--stt", help="STT model measured (default tiny-stt)"))
    rows: str = field(default="1,8,32", metadata=cli_option(
        "--rows", help="row counts (default 1,8,32)"))
    frames: int = field(default=20, metadata=cli_option("--frames"))
    json: bool = _json()


@dataclass(frozen=True)
class PipelineBench:
    model: str = field(default="tiny", metadata=cli_option(
        "--model", help="speech model (default tiny)"))
    device: str | None = field(default=None, metadata=cli_option("--device"))
    turns: int = field(default=20, metadata=cli_option("--turns"))
    json: bool = _json()


@dataclass(frozen=True)
class AudioLatencyBench:
    seconds: float = field(default=10.0, metadata=cli_option("--seconds"))
    system_devices: bool = field(default=False, metadata=cli_option(
        "--system-devices", help="use the system's devices instead of a private null sink"))


@dataclass(frozen=True)
class EchoBench:
    seconds: float = field(default=12.0, metadata=cli_option("--seconds"))
    system_devices: bool = field(default=False, metadata=cli_option("--system-devices"))


@dataclass(frozen=True)
class PlaybackDelayBench:
    seconds: float = field(default=10.0, metadata=cli_option(
        "--seconds", help="per run (default 10)"))
    listener_ms: float = field(default=50.0, metadata=cli_option(
        "--listener-ms", help="the slow listener's sleep per call (default 50)"))
    json: bool = _json()


@dataclass(frozen=True)
class MimiBench:
    model: str = field(default="tiny", metadata=cli_option(
        "--model", help="whose Mimi (default tiny)"))
    frames: int = field(default=12, metadata=cli_option("--frames"))
    json: bool = _json()


@dataclass(frozen=True)
class SoakBench:
    minutes: float = field(default=10.0, metadata=cli_option("--minutes"))
    json: bool = _json()


@dataclass(frozen=True)
class GpuBench:
    model: str | None = field(default=None, metadata=cli_option(
        "--model", help="catalog id (default: the PersonaPlex 7B architecture with random "
                        "weights, built on the GPU)"))
    device: str | None = field(default=None, metadata=cli_option(
        "--device", help="cuda (default: the first CUDA GPU)"))
    dtype: str = field(default="bfloat16", metadata=cli_option(
        "--dtype", choices=("bfloat16", "float16", "float32")))
    precision: str | None = field(default=None, metadata=cli_option(
        "--precision", metavar="LIST",
        help="comma-separated precisions to measure one after the other, e.g. bf16,fp8,int4 "
             "(fp32, bf16, int8, fp8, int4): each one's step, block + step, memory and token "
             "agreement with the first, each row on stderr as soon as it is measured"))
    # None: 16, 64, 256, 400, 600
    blocks: tuple[int, ...] | None = field(default=None, metadata=cli_option(
        "--block", kind="list", metavar="N",
        help="span block size in tokens, repeatable (default 16 64 256 400 600)"))
    repeats: int = field(default=7, metadata=cli_option("--repeats"))
    allow_cpu: bool = field(default=False, metadata=cli_option(
        "--allow-cpu", help="run on a CPU too (for testing the command's paths)"))
    slots: str | None = field(default=None, metadata=cli_option(
        "--slots", metavar="N,N,...",
        help="also: conversations in one batched engine, every one talking, a span a second "
             "somewhere (e.g. 1,8,16,32,48,64): frame p50/p99, memory per slot, the largest N "
             "that holds the 80 ms frame"))
    slot_frames: int = field(default=40, metadata=cli_option(
        "--slot-frames", help="frames measured per slot count (default 40)"))
    slots_until_miss: bool = field(default=False, metadata=cli_option(
        "--slots-until-miss", help="no slot count after the first that fails or misses the "
                                   "frame"))
    asr: str | None = field(default=None, metadata=cli_option(
        "--asr", metavar="STT",
        help="with --slots: a recogniser of N rows on this STT beside each count (not on disk: "
             "its published architecture, random weights)"))
    compile_step: bool = field(default=False, metadata=cli_option(
        "--compile", help="the blocks' engine with its step compiled by torch.compile (in the "
                          "warm-up; the figure 'compile' says what it took)"))
    json: bool = _json()


@dataclass(frozen=True)
class ServerBench:
    model: str = field(default="tiny", metadata=cli_option("--model"))
    device: str = field(default="cpu", metadata=cli_option("--device"))
    frames: int = field(default=125, metadata=cli_option(
        "--frames", help="frames per path (80 ms each)"))
    most: int = field(default=4, metadata=cli_option(
        "--most", metavar="N", help="try up to N conversations at once (0: skip that part)"))
    threads: int = field(default=1, metadata=cli_option(
        "--threads", help="torch threads per process (default 1: a shared CPU)"))
    asr: str | None = field(default=None, metadata=cli_option(
        "--asr", metavar="STT",
        help="the server recognises the user's words with this STT model (as serve --asr, e.g. "
             "tiny-stt): the link's text stream with each word sent once and event by event"))
    json: bool = _json()


@dataclass(frozen=True)
class JoinsBench:
    """app/bench/joins_bench.py says what each figure is."""

    model: str = field(default="tiny-cs", metadata=cli_option(
        "--model", help="the server's model (default tiny-cs: a voice prompt and a persona "
                        "start each conversation)"))
    device: str = field(default="cpu", metadata=cli_option("--device"))
    slots: int = field(default=4, metadata=cli_option("--slots"))
    joiners: int = field(default=20, metadata=cli_option("--joiners"))
    join_frames: int = field(default=12, metadata=cli_option(
        "--join-frames", help="frames each joiner talks (default 12: about a second)"))
    alone_s: float = field(default=8.0, metadata=cli_option(
        "--alone", help="seconds the long conversation talks alone first"))
    clone_every: int = field(default=3, metadata=cli_option(
        "--clone-every", help="every Nth joiner clones a voice (0: none)"))
    reset_every: int = field(default=4, metadata=cli_option(
        "--reset-every", help="every Nth joiner resets once (0: none)"))
    voice_seconds: float = field(default=30.0, metadata=cli_option("--voice-seconds"))
    chunk_limit: int | None = field(default=None, metadata=cli_option("--chunk-limit"))
    url: str | None = field(default=None, metadata=cli_option(
        "--url", help=f"a server already running (token {JOINS_TOKEN!r}) instead of one "
                      "started here"))


BenchRequest = (InjectionBench | EngineBench | StepBench | AsrBench | PipelineBench
                | AudioLatencyBench | EchoBench | PlaybackDelayBench | MimiBench | SoakBench
                | GpuBench | ServerBench | JoinsBench)

# `bench KIND`: its request and its help, in the order `bench --help` lists them.
BENCHMARKS: dict[str, tuple[type[BenchRequest], str]] = {
    "injection": (InjectionBench, "chunked prefill against one-by-one"),
    "engine": (EngineBench, "the one-row engine's cost per frame, beside another checkout's"),
    "step": (StepBench, "what one engine step launches and reads, by part, beside stock "
                        "moshi's LMGen on the same weights (any machine)"),
    "asr": (AsrBench, "one recogniser for N conversations: its state, speed, and the 1B's"),
    "pipeline": (PipelineBench, "per-stage latency of scripted turns against a stand-in "
                                "Ollama"),
    "audio-latency": (AudioLatencyBench, "mic-to-speaker latency through the app's audio "
                                         "path"),
    "echo": (EchoBench, "dB of the model's voice echo cancellation removes"),
    "playback-delay": (PlaybackDelayBench, "the engine's audio to AudioSource.play(), idle "
                                           "and with a slow transcript listener"),
    "mimi": (MimiBench, "Mimi's encode + decode of a frame, torch's and MLX's, and their "
                        "agreement"),
    "soak": (SoakBench, "a long live session: dropped frames, memory"),
    "gpu": (GpuBench, "(CUDA) the 7B's step, span blocks' prefill and exactness in bf16, "
                      "graphs"),
    "server": (ServerBench, "serve's network path: round trip per frame over a local engine, "
                            "Opus bandwidth, conversations at once without late frames"),
    "joins": (JoinsBench, "serve --slots N: a long conversation's gaps while others join, "
                          "clone a voice, reset and leave; each joiner's time to ready"),
}
