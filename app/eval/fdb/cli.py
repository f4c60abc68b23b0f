"""`python main.py eval fdb`: render Full-Duplex-Bench v1/v1.5 samples, then score v1.

The `eval` command adds this parser with `add_fdb_parser(its subparsers)` and, for
`eval fdb`, returns `run_fdb(args)`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from app.command_options import add_options, comma_separated, from_args
from app.conversation.options import (  # light
    EVAL_FDB,
    LLM_SIDE,
    SPEECH,
    add_conversation_options,
)
from app.eval.fdb.layout import (
    CONVERSATION_PROMPT,
    PROFILE_CITY,
    TEACHER_PROMPT,
)
from app.eval.fdb.render import RENDERING, VOICES, RenderOptions
from app.eval.fdb.score import ScoreOptions
from app.eval.judge_settings import JudgeSettings

if TYPE_CHECKING:
    from app.conversation.config import ConversationConfig

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
    add_options(parser, RenderOptions, section="")

    render = parser.add_argument_group("rendering")
    add_conversation_options(render, EVAL_FDB, SPEECH, skip=("voice",),  # in `voices` below
                             defaults={"user_city": PROFILE_CITY},
                             notes={"user_city": "the reference's profile"})
    add_options(render, RenderOptions, section=RENDERING)
    voices = render.add_mutually_exclusive_group()
    add_conversation_options(voices, EVAL_FDB, SPEECH, only=("voice",),
                             notes={"voice": "for every sample"})
    add_options(voices, RenderOptions, section=VOICES)

    side = parser.add_argument_group(
        "the LLM side while rendering (as the reference renders with its whole stack; "
        "without --llm the speech model runs alone)")
    add_conversation_options(side, EVAL_FDB, LLM_SIDE, notes={
        "stt_model": "default with --llm: the --stt model"})

    score = parser.add_argument_group("scoring")
    add_options(score, ScoreOptions)
    add_options(score, JudgeSettings, notes={"backend": "it rates interruption replies for "
                                                        "relevance"})
    return parser


def conversation_config(args: argparse.Namespace) -> ConversationConfig:
    """The samples' conversation from the arguments: the speech model, and the LLM side
    with --llm (its ASR: --asr, else the --stt model)."""
    from app.conversation.options import conversation_from_args

    if args.llm is None:
        if args.asr or args.tools or args.folder_search or args.vad:
            raise ValueError("--asr, --vad, --tools and --folder-search need --llm")
        return conversation_from_args(args)
    return conversation_from_args(args, stt_model=args.asr or args.stt or "none")


def render_options(args: argparse.Namespace) -> RenderOptions:
    if args.limit < 0:
        raise ValueError("--limit must be 0 (all) or more")
    if not 0 <= args.tail_seconds <= 60:  # NaN fails too
        raise ValueError("--tail-seconds must be from 0 to 60")
    if not args.timeout > 0:
        raise ValueError("--timeout must be more than 0 seconds")
    return from_args(RenderOptions, args, conversation=conversation_config(args))


def run_fdb(args: argparse.Namespace) -> int:
    """`eval fdb`: render (unless --score-only), then score (unless --render-only). Bad
    arguments raise ValueError with a one-line message."""
    from app.eval.fdb.render import render_all
    from app.eval.fdb.score import score_all

    tasks = comma_separated(args.tasks, {})
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
    judge = from_args(JudgeSettings, args) if args.judge else None
    score_all(args.out, from_args(ScoreOptions, args, device=args.device, tasks=tasks,
                                  judge=judge))
    from app.eval.fdb.score import SCORES_MD

    print((args.out / SCORES_MD).read_text(encoding="utf-8"))
    return status
