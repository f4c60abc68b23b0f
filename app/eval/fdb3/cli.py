"""`python main.py eval fdb3 ...`: Full-Duplex-Bench v3, tool use under disfluent speech.

    eval fdb3 make-demo DIR            a small spoken set in the released layout
    eval fdb3 run DIR --provider NAME  every sample through the whole pipeline
    eval fdb3 score DIR --provider NAME   tool selection, arguments, responses, pass rate,
                                          latencies: JSON and Markdown beside the paper's

The `eval` command adds this parser with `add_fdb3_parser(its subparsers)` and, for
`eval fdb3`, returns `run_fdb3_command(args)`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from app.command_options import add_options, from_args
from app.conversation.options import (  # light: no torch
    EVAL_FDB3,
    LLM_SIDE,
    SPEECH,
    add_conversation_options,
)
from app.eval.fdb.layout import PROFILE_CITY
from app.eval.fdb3.layout import DEFAULT_STT
from app.eval.fdb3.run_options import LLM_SIDE as LLM_SIDE_OWN
from app.eval.fdb3.run_options import SPEECH_MODEL, Fdb3RunOptions
from app.eval.judge_settings import JudgeSettings
from app.llm_backends import OLLAMA

EXIT_OK, EXIT_FAILED = 0, 1


def _add_judge(parser: argparse.ArgumentParser) -> None:
    judge = parser.add_argument_group(
        "the LLM judge (without it, arguments are matched exactly and responses are not "
        "judged, as the benchmark's scripts do without --use-llm)")
    add_options(judge, JudgeSettings, notes={"backend": "the benchmark's judge is gpt-4o"})


def add_fdb3_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "fdb3", help="Full-Duplex-Bench v3: tool use under disfluent speech (the paper's "
                     "tool-use table)",
        description="Full-Duplex-Bench v3: make a demo set, run a set through the whole "
                    "pipeline (the benchmark's 12 tools served by our MCP server), score "
                    "it. The layout is the release's: {example_id}_{speaker}/input.wav and "
                    "metadata.json; results go beside them as result_<provider>.json.")
    steps = parser.add_subparsers(dest="fdb3_command")

    demo = steps.add_parser("make-demo", help="a small spoken set (espeak-ng): 4 domains, "
                                              "easy to hard, with the stand-in's plans")
    demo.add_argument("dir", type=Path, help="a new (or empty) folder")

    run = steps.add_parser("run", help="every sample through the whole pipeline",
                           description="Resumable: samples with a result_<provider>.json "
                                       "are skipped (--force runs them again).")
    run.add_argument("dir", type=Path, help="the data: {example_id}_{speaker}/input.wav")
    add_options(run, Fdb3RunOptions, section="")
    model = run.add_argument_group("the speech model")
    add_conversation_options(model, EVAL_FDB3, SPEECH,
                             defaults={"user_city": PROFILE_CITY},
                             notes={"user_city": "the reference's profile"})
    add_options(model, Fdb3RunOptions, section=SPEECH_MODEL)
    side = run.add_argument_group("the LLM side")
    add_options(side, Fdb3RunOptions, section=LLM_SIDE_OWN, only=("llm",))
    add_conversation_options(side, EVAL_FDB3, LLM_SIDE, defaults={"stt_model": DEFAULT_STT},
                             notes={"stt_model": "tiny-stt on a CPU demo"})
    add_options(side, Fdb3RunOptions, section=LLM_SIDE_OWN, skip=("llm",))

    score = steps.add_parser("score", help="score the results into JSON and Markdown")
    score.add_argument("dir", type=Path)
    score.add_argument("--provider", required=True)
    score.add_argument("--benchmark", type=Path, default=None, metavar="JSON",
                       help="the benchmark's benchmark_data_v2.json (when the folders' "
                            "metadata.json lack the expected calls)")
    _add_judge(score)
    return parser


def run_fdb3_command(args: argparse.Namespace) -> int:
    command = getattr(args, "fdb3_command", None)
    if command == "make-demo":
        from app.eval.fdb3.make_demo import make_demo

        folders = make_demo(args.dir)
        print(f"made {len(folders)} spoken samples in {args.dir} (run them with: python "
              f"main.py eval fdb3 run {args.dir} --provider demo --llm standin --asr "
              "tiny-stt --vad)")
        return EXIT_OK
    if command == "run":
        from app.conversation.options import conversation_from_args
        from app.eval.fdb3.run import run_fdb3

        # --llm is fdb3's own (the stand-in too): the backend is _conversation's choice.
        conversation = conversation_from_args(args, backend=OLLAMA)
        report = run_fdb3(args.dir, from_args(Fdb3RunOptions, args, conversation=conversation))
        print(f"[fdb3] ran {report.ran}, already done {report.already_done}, failed "
              f"{len(report.failed)} of {report.samples}", file=sys.stderr)
        if report.samples == 0:
            print(f"error: no {{example_id}}_{{speaker}}/input.wav under {args.dir}",
                  file=sys.stderr)
            return EXIT_FAILED
        if report.never_heard:
            print(f"error: {report.stopped}", file=sys.stderr)
            return EXIT_FAILED
        return EXIT_FAILED if report.stopped or report.ran + report.already_done == 0 \
            else EXIT_OK
    if command == "score":
        from app.eval.fdb3.report import write_report
        from app.eval.fdb3.score import score_results

        judge = None
        if args.judge:
            from app.eval.fdb3.judge import ToolJudge
            from app.llm.backend import LLMError

            backend = from_args(JudgeSettings, args).client(temperature=0.0)
            try:
                backend.list_models()
            except LLMError as exc:
                raise ValueError(f"the judge cannot be reached: {exc}") from exc
            judge = ToolJudge(backend, f"{args.judge}:{args.judge_model or 'default'}")
        scores = score_results(args.dir, args.provider, judge, args.benchmark)
        paths = write_report(args.dir, args.provider, scores)
        print(paths["markdown"].read_text(encoding="utf-8"))
        print(f"wrote {paths['json']} and {paths['markdown']}", file=sys.stderr)
        return EXIT_OK
    print("error: choose make-demo, run or score (see python main.py eval fdb3 --help)",
          file=sys.stderr)
    return 2
