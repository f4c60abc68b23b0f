"""`python main.py eval fdb`: render Full-Duplex-Bench v1/v1.5 samples, then score v1.

The `eval` command adds this parser with `add_fdb_parser(its subparsers)` and, for
`eval fdb`, returns `run_fdb(args)`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from app.eval.fdb.layout import (
    CONVERSATION_PROMPT,
    PROFILE_CITY,
    REFERENCE_SEED,
    TEACHER_PROMPT,
)
from app.frames import SAMPLE_RATE

EXIT_OK, EXIT_FAILED = 0, 1


def add_fdb_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "fdb", help="Full-Duplex-Bench v1/v1.5: render the replies, score v1",
        description="Render every */input.wav under --data through the engine into --out "
                    "(the benchmark's layout: <task>/<id>/output.wav on the input's timeline, "
                    "clean_output.wav where v1.5 has clean_input.wav, the sample's files "
                    "copied beside), then score the v1 tasks with our own STT and VAD. "
                    "Persona checkpoints get the benchmark's prompts: "
                    f"\"{TEACHER_PROMPT}\" for interruption tasks, \"{CONVERSATION_PROMPT}\" "
                    "for the others; checkpoints without a persona start ignore them. "
                    "Resumable: samples whose output.wav exists are skipped.")
    parser.add_argument("--data", type=Path, default=None,
                        help="the benchmark's data (e.g. the folder holding v1_0 and v1_5)")
    parser.add_argument("--out", type=Path, required=True,
                        help="output root; each task folder inside is a --root_dir for the "
                             "benchmark's scripts")
    steps = parser.add_mutually_exclusive_group()
    steps.add_argument("--render-only", action="store_true", help="render, do not score")
    steps.add_argument("--score-only", action="store_true",
                       help="score what --out holds, render nothing (no --data needed)")
    parser.add_argument("--tasks", default="",
                        help="comma-separated task folders (default: all)")
    parser.add_argument("--limit", type=int, default=0, help="samples per task (default: all)")

    render = parser.add_argument_group("rendering")
    render.add_argument("--model", default="tiny", help="catalog id (python main.py models)")
    render.add_argument("--folder", type=Path, default=None, help="checkpoint folder to load")
    render.add_argument("--device", default=None, help="cuda, mps or cpu (default: best found)")
    render.add_argument("--dtype", default=None, choices=["float32", "bfloat16", "float16"])
    render.add_argument("--seed", type=int, default=REFERENCE_SEED,
                        help=f"one seed for every sample (default: the reference's, "
                             f"{REFERENCE_SEED})")
    voices = render.add_mutually_exclusive_group()
    voices.add_argument("--voice", default=None,
                        help="voice prompt for every sample (persona checkpoints)")
    voices.add_argument("--voice-pool", default="",
                        help="comma-separated voices, one per sample by a hash of its path, "
                             "as the reference does (it used f0,f1,f2)")
    render.add_argument("--sample-rate", type=int, default=16000, choices=[16000, SAMPLE_RATE],
                        help="rate of output.wav (default 16000, as the benchmark's examples)")
    render.add_argument("--tail-seconds", type=float, default=0.0, metavar="SECONDS",
                        help="silence appended to each input, so the reply may run on past "
                             "it (the reference appended 2 s; output.wav is then longer "
                             "than input.wav by as much). Default 0: the input's length")
    render.add_argument("--user-name", default=None,
                        help="your name, for checkpoints trained on it (context-spanning-7b)")
    render.add_argument("--user-city", default=PROFILE_CITY,
                        help="the user's city, for checkpoints trained on it (default "
                             f"{PROFILE_CITY}, the reference's profile)")
    render.add_argument("--timeout", type=float, default=3600.0, metavar="SECONDS",
                        help="longest a sample may take to render")

    side = parser.add_argument_group(
        "the LLM side while rendering (as the reference renders with its whole stack; "
        "without --llm the speech model runs alone)")
    side.add_argument("--llm", choices=["ollama", "openai"], default=None,
                      help="ask this LLM backend on each user turn and inject its findings")
    side.add_argument("--llm-host", default=None,
                      help="Ollama host or an OpenAI-compatible base URL")
    side.add_argument("--llm-model", default=None)
    side.add_argument("--llm-timeout", type=float, default=30.0, metavar="SECONDS")
    side.add_argument("--asr", default=None, metavar="STT_MODEL",
                      help="the pipeline's streaming ASR (default with --llm: the --stt model)")
    side.add_argument("--vad", action="store_true",
                      help="end user turns by voice activity even if the STT has its own "
                           "signal")
    side.add_argument("--tools", default=None,
                      help="comma-separated tools (default: all configured); 'none' for none")
    side.add_argument("--folder-search", action="append", default=[], metavar="DIR",
                      help="a folder local_search may read (repeatable)")
    side.add_argument("--level-voice", action="store_true",
                      help="level the input to -24 LUFS before the model and the ASR hear it")

    score = parser.add_argument_group("scoring")
    score.add_argument("--stt", default="kyutai-stt-1b-en_fr",
                       help="our STT for the word timestamps (models/stt)")
    score.add_argument("--backchannel-reference", type=Path, default=None, metavar="JSON",
                       help="the benchmark's icc_gt_distribution.json, for backchannel JSD")
    score.add_argument("--fdb-official-rates", action="store_true",
                       help="backchannel: hand Silero output.wav's samples at the file's own "
                            "rate, told 16 kHz, as the benchmark's script does (a 24 kHz "
                            "file, as the reference rendered, is heard time-stretched: the "
                            "paper's numbers). Default: at 16 kHz, true times")
    score.add_argument("--judge", choices=["ollama", "openai"], default=None,
                       help="rate interruption replies for relevance with this LLM backend")
    score.add_argument("--judge-host", default=None,
                       help="Ollama host or an OpenAI-compatible base URL")
    score.add_argument("--judge-model", default=None)
    score.add_argument("--judge-timeout", type=float, default=60.0, metavar="SECONDS")
    return parser


def _names(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def conversation_config(args: argparse.Namespace):
    """The headless run's LLM side from the arguments; None without --llm."""
    from app.conversation.config import ConversationConfig

    if args.llm is None:
        if args.asr or args.tools or args.folder_search or args.vad:
            raise ValueError("--asr, --vad, --tools and --folder-search need --llm")
        return None
    tools = None
    if args.tools is not None:
        tools = () if args.tools.strip().lower() == "none" else _names(args.tools)
    return ConversationConfig(
        stt_model=args.asr or args.stt or "none", end_of_turn="vad" if args.vad else "auto",
        backend=args.llm, host=args.llm_host or "", model=args.llm_model or "",
        timeout_s=args.llm_timeout, tools=tools, search_folders=tuple(args.folder_search),
        level_voice=args.level_voice)


def render_options(args: argparse.Namespace):
    from app.eval.fdb.render import RenderOptions

    if args.limit < 0:
        raise ValueError("--limit must be 0 (all) or more")
    if not 0 <= args.tail_seconds <= 60:  # NaN fails too
        raise ValueError("--tail-seconds must be from 0 to 60")
    if not args.timeout > 0:
        raise ValueError("--timeout must be more than 0 seconds")
    return RenderOptions(
        model=args.model, seed=args.seed, voice=args.voice,
        voice_pool=_names(args.voice_pool), device=args.device, dtype=args.dtype,
        folder=args.folder, sample_rate=args.sample_rate, tasks=_names(args.tasks),
        limit=args.limit, timeout_s=args.timeout, conversation=conversation_config(args),
        user_name=args.user_name, user_city=args.user_city, tail_s=args.tail_seconds)


def run_fdb(args: argparse.Namespace) -> int:
    """`eval fdb`: render (unless --score-only), then score (unless --render-only). Bad
    arguments raise ValueError with a one-line message."""
    from app.eval.fdb.judge import JudgeSettings
    from app.eval.fdb.render import render_all
    from app.eval.fdb.score import ScoreOptions, score_all

    tasks = _names(args.tasks)
    status = EXIT_OK
    if not args.score_only:
        options = render_options(args)
        if args.data is None:
            raise ValueError("--data is needed to render (or pass --score-only)")
        if not args.data.is_dir():
            raise ValueError(f"--data {args.data} is not a folder")
        report = render_all(args.data, args.out, options)
        if report.samples == 0:
            print(f"error: no */input.wav under {args.data}", file=sys.stderr)
            return EXIT_FAILED
        if report.stopped or report.rendered + report.already_done == 0:
            return EXIT_FAILED
    if args.render_only:
        return status
    judge = None
    if args.judge:
        judge = JudgeSettings(args.judge, args.judge_host, args.judge_model, args.judge_timeout)
    score_all(args.out, ScoreOptions(stt=args.stt, device=args.device, tasks=tasks,
                                     backchannel_reference=args.backchannel_reference,
                                     judge=judge, official_rates=args.fdb_official_rates))
    from app.eval.fdb.score import SCORES_MD

    print((args.out / SCORES_MD).read_text(encoding="utf-8"))
    return status
