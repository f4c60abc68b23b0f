"""`python main.py eval ...`: the evaluation commands.

- `eval qa`: spoken QA sets through the whole pipeline, judged; results.json, results.md
  (beside the paper's numbers) and results.png in --out.
- `eval make-set`: a span-only QA set of random facts (make_set.py).
- `eval fdb`: Full-Duplex-Bench (app/eval/fdb/cli.py).
- `eval fdb3`: Full-Duplex-Bench v3, tool use (app/eval/fdb3/cli.py).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from app.command_options import add_options, from_args
from app.conversation.config import ConversationConfig
from app.conversation.options import (  # light
    EVAL_QA,
    LLM_SIDE,
    SPEECH,
    add_conversation_options,
    offered_options,
)
from app.eval.judge_settings import JudgeSettings
from app.eval.qa_runner import QA_CONVERSATION, SPEECH_MODEL, QaRunOptions

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def _qa_defaults() -> dict[str, object]:
    """Where `eval qa`'s conversation differs from a plain one (QA_CONVERSATION)."""
    plain = ConversationConfig(model_id="tiny")
    return {name: getattr(QA_CONVERSATION, name) for name in offered_options(EVAL_QA)
            if getattr(QA_CONVERSATION, name) != getattr(plain, name)}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse's hook
        self.exit(EXIT_USAGE, f"error: {message} (see --help)\n")


def _add_qa_parser(commands) -> None:
    qa = commands.add_parser(
        "qa", help="spoken QA with and without injection, judged (the paper's QA tables)",
        description="Run each item's question audio plus --tail seconds of silence through "
                    "the whole pipeline (engine, ASR, orchestrator, LLM and tools, injection) "
                    "with the checkpoint's trigger (<ret> or the end of the user's turn), the "
                    "LLM's latency replayed as frames (the same transcript on any machine). "
                    "Then judge the answers and write results.json, results.md and "
                    "results.png into --out. Nothing is downloaded: --data is a local folder.")
    qa.add_argument("--data", type=Path, default=None,
                    help="a set: a folder with meta.json + audios/<id>.wav, an OpenAudioBench "
                         "set folder (<set>/<set>.csv + audios/), or the OpenAudioBench root "
                         "(with --set, or every set in it)")
    qa.add_argument("--set", dest="sets", action="append", default=[], metavar="NAME",
                    help="an OpenAudioBench set under --data (repeatable)")
    qa.add_argument("--out", type=Path, required=True,
                    help="output folder: <set>/<arm>/<item>/ per item, results.* at the top")
    arm = qa.add_mutually_exclusive_group()
    arm.add_argument("--inject", dest="arm", action="store_const", const="inject",
                     help="the LLM answers each trigger and its span is injected (default)")
    arm.add_argument("--no-inject", dest="arm", action="store_const", const="no-inject",
                     help="nothing is injected (the same pipeline, the span withheld)")
    arm.add_argument("--gold", dest="arm", action="store_const", const="gold",
                     help="the item's gold passage (knowledge) is the span, where it has one")
    qa.set_defaults(arm="inject")
    steps = qa.add_mutually_exclusive_group()
    steps.add_argument("--run-only", action="store_true", help="run the items, judge nothing")
    steps.add_argument("--score-only", action="store_true",
                       help="judge what --out holds (every set and arm), run nothing")
    add_options(qa, QaRunOptions, section="")

    model = qa.add_argument_group("the speech model")
    add_conversation_options(model, EVAL_QA, SPEECH, defaults=_qa_defaults(),
                             notes={"user_city": "the reference's profile"})
    add_options(model, QaRunOptions, section=SPEECH_MODEL)

    side = qa.add_argument_group("the LLM side")
    add_conversation_options(side, EVAL_QA, LLM_SIDE, defaults=_qa_defaults(), notes={
        "backend": "needed by --inject",
        "ret_deadline_s": "the reference benchmark's allows 10",
        "tools": "sets made by make-set add local_search on their facts folder"})

    judge = qa.add_argument_group("the judge")
    add_options(judge, JudgeSettings, notes={"backend": "without it nothing is judged"})
    judge.add_argument("--judge-samples", type=int, default=1, metavar="N",
                       help="judge each answer N times, the majority decides "
                            "(self-consistency)")
    judge.add_argument("--judge-temperature", type=float, default=None,
                       help="default 0 with one sample, 1 with several")
    judge.add_argument("--judge-prompt", default=None, metavar="KIND",
                       help="app/eval/prompts/KIND.txt for every set (default: by set: "
                            "short_answer, passage for HaluEval, math, span_fact)")


def _add_make_set_parser(commands) -> None:
    make = commands.add_parser(
        "make-set", help="a span-only QA set of random facts, reachable only by local search",
        description="Write a QA set (meta.json layout) of fresh random facts (invented names "
                    "with codes, times, people) whose answers no model can know. Questions "
                    "are spoken by espeak-ng; the facts go only into <out>/facts, which eval "
                    "qa gives the LLM's local_search tool. Its --no-inject arm must score "
                    "near zero.")
    make.add_argument("--out", type=Path, required=True, help="a new (or empty) folder")
    make.add_argument("--count", type=int, default=100)
    make.add_argument("--seed", type=int, default=None, help="default: fresh facts each time")
    make.add_argument("--name", default="span_facts", help="the set's name in the results")
    make.add_argument("--voice", default="en-us", help="espeak-ng voice")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python main.py eval",
                     description="Evaluation harnesses that reproduce the paper's tables "
                                 "(see docs/reproducing-the-paper.md).")
    commands = parser.add_subparsers(dest="eval_command", parser_class=_Parser)
    _add_qa_parser(commands)
    _add_make_set_parser(commands)
    try:
        from app.eval.fdb.cli import add_fdb_parser
    except ImportError as exc:  # the Full-Duplex-Bench command is optional here
        fdb = commands.add_parser("fdb", help=f"Full-Duplex-Bench (unavailable: {exc})")
        fdb.set_defaults(fdb_missing=str(exc))
    else:
        add_fdb_parser(commands)
    from app.eval.fdb3.cli import add_fdb3_parser

    add_fdb3_parser(commands)
    return parser


def main_eval(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(list(argv))
    if args.eval_command == "qa":
        return _cmd_qa(args)
    if args.eval_command == "make-set":
        return _cmd_make_set(args)
    if args.eval_command == "fdb":
        if getattr(args, "fdb_missing", None):
            raise ValueError(f"eval fdb is not available: {args.fdb_missing}")
        from app.eval.fdb.cli import run_fdb

        return run_fdb(args)
    if args.eval_command == "fdb3":
        from app.eval.fdb3.cli import run_fdb3_command

        return run_fdb3_command(args)
    print("error: choose qa, make-set, fdb or fdb3 (see python main.py eval --help)",
          file=sys.stderr)
    return EXIT_USAGE


def _cmd_make_set(args: argparse.Namespace) -> int:
    from app.eval.make_set import make_span_set

    out = make_span_set(args.out, args.count, args.seed, args.name, args.voice)
    print(f"made {args.count} spoken facts in {out} (facts for local search in {out}/facts)")
    return EXIT_OK


def _cmd_qa(args: argparse.Namespace) -> int:
    if args.limit < 0:
        raise ValueError("--limit must be 0 (all) or more")
    if not 0 < args.ret_deadline <= 60:  # NaN fails too
        raise ValueError("--ret-deadline must be above 0 and at most 60 seconds")
    if args.judge_samples < 1:
        raise ValueError("--judge-samples must be at least 1")
    if args.judge_prompt is not None:
        from app.eval.judge import load_prompt

        load_prompt(args.judge_prompt)  # a typo fails before hours of running
    failed = False
    if not args.score_only:
        failed = _run_sets(args)
    if args.run_only:
        return EXIT_FAILED if failed else EXIT_OK
    if args.judge is None:
        print("not judged: give --judge ollama|openai (and --judge-model) to score "
              f"(then: python main.py eval qa --out {args.out} --score-only --judge ...)",
              file=sys.stderr)
        return EXIT_FAILED if failed else EXIT_OK
    _score(args)
    return EXIT_FAILED if failed else EXIT_OK


def _run_sets(args: argparse.Namespace) -> bool:
    """Run every set named; True if one could not run at all."""
    from app.conversation.options import conversation_from_args
    from app.eval.qa_runner import run_qa_set
    from app.eval.qa_sets import QaSetError, load_qa_set, openaudiobench_sets

    if args.data is None:
        raise ValueError("--data is needed to run (or pass --score-only)")
    if args.data.is_dir() and not (args.data / "meta.json").is_file() and not args.sets and \
            not (args.data / f"{args.data.name}.csv").is_file():
        args.sets = openaudiobench_sets(args.data)
    names = args.sets or [None]
    options = from_args(QaRunOptions, args, conversation=conversation_from_args(args),
                        arm=args.arm)
    failed = False
    for name in names:
        try:
            qa_set = load_qa_set(args.data, name)
        except QaSetError as exc:
            print(f"error: {exc}", file=sys.stderr)
            failed = True
            continue
        report = run_qa_set(qa_set, args.out, options)
        rate = report.ran / (report.seconds / 60) if report.seconds else 0.0
        print(f"{qa_set.name}/{args.arm}: ran {report.ran}, resumed {report.resumed}, "
              f"left out {len(report.problems)}"
              + (f" ({rate:.1f} items per minute)" if report.ran else ""), file=sys.stderr)
    return failed


def _score(args: argparse.Namespace) -> None:
    from app.eval.judge import Judge
    from app.eval.qa_report import write_report
    from app.eval.qa_score import arm_folders, score_arm
    from app.llm.backend import LLMError

    temperature = args.judge_temperature
    if temperature is None:
        temperature = 0.0 if args.judge_samples == 1 else 1.0
    backend = from_args(JudgeSettings, args).client(temperature)
    try:
        backend.list_models()
    except LLMError as exc:
        raise ValueError(f"the judge cannot be reached: {exc}") from exc
    judge = Judge(backend, args.judge_samples)
    judge_id = f"{args.judge}:{args.judge_model or 'default'}@T{temperature:g}"
    folders = arm_folders(args.out)
    if not folders:
        raise ValueError(f"nothing to judge in {args.out} (no finished items)")
    results = [score_arm(folder, judge, judge_id, args.judge_prompt)
               for _, _, folder in folders]
    paths = write_report(args.out, results, judge_id, args.judge_samples)
    print(paths["markdown"].read_text(encoding="utf-8"))
    print(f"wrote {paths['json']}, {paths['markdown']}, {paths['chart']}", file=sys.stderr)
