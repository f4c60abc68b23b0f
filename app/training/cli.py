"""`python main.py train ...`: fine-tune a checkpoint on span-injected conversations.

`main_train(argv)` takes the arguments after `train`; the app's CLI hands them over.
Errors are one line on stderr and a non-zero exit, as in the rest of the CLI.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

EXIT_USAGE = 2
EXIT_FAILURE = 1


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse's hook
        self.exit(EXIT_USAGE, f"error: {message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python main.py train",
                     description="Fine-tune a checkpoint to read injected spans.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    smoke = commands.add_parser(
        "tiny-smoke",
        help="a few seconds of training of the tiny model on a synthetic span task; "
             "saves it as a catalog model and prints JSON",
    )
    smoke.add_argument("--steps", type=int, default=30)
    smoke.add_argument("--batch-size", type=int, default=4)
    smoke.add_argument("--lr", type=float, default=3e-3)
    smoke.add_argument("--lora", action="store_true", help="LoRA instead of full fine-tuning")
    smoke.add_argument("--id", default="tiny-span-trained", help="catalog id of the result")
    smoke.add_argument("--seed", type=int, default=0)
    smoke.add_argument("--no-save", action="store_true", help="train only, save nothing")
    from app.training.recipe import add_arguments as add_recipe_arguments

    add_recipe_arguments(commands.add_parser(
        "recipe",
        help="build spoken dialogues with facts (espeak-ng, the model's Mimi), inject the "
             "facts as spans and fine-tune (LoRA for 7B); see docs/fine-tuning.md",
    ))
    from app.training.span_proxy import add_arguments as add_span_proxy_arguments

    add_span_proxy_arguments(commands.add_parser(
        "span-proxy",
        help="the proof on a tiny model: train it to read key-value facts from injected "
             "spans, evaluate through LMGen and the span injector (and on MLX with "
             "--engines torch,mlx); prints one JSON object with --json, else a summary",
    ))
    return parser


def _tiny_smoke(args: argparse.Namespace) -> dict:
    import torch

    from app.checkpoints.catalog import get_manifest
    from app.checkpoints.loader import ensure_built, load_checkpoint
    from app.training.trainer import TrainConfig, save_trained, synthetic_batches, train

    manifest = get_manifest("tiny")
    checkpoint = load_checkpoint(manifest, ensure_built(manifest), device="cpu")
    config = TrainConfig(steps=args.steps, batch_size=args.batch_size, lr=args.lr,
                         lora=args.lora, seed=args.seed)
    result = train(checkpoint.lm, synthetic_batches(checkpoint, config.batch_size, seed=args.seed),
                   config)
    window = max(1, min(5, len(result.losses) // 4))
    report = {
        "model": manifest.id,
        "steps": len(result.losses),
        "lora": result.lora,
        "trainable_params": result.trainable_params,
        "seconds": round(result.seconds, 2),
        "threads": torch.get_num_threads(),
        "loss_first": round(result.mean_first(window), 4),
        "loss_last": round(result.mean_last(window), 4),
        "averaged_over_steps": window,
    }
    if not args.no_save:
        folder, manifest_path = save_trained(checkpoint, result, config, args.id)
        report.update(id=args.id, folder=str(folder), manifest=str(manifest_path))
    return report


def main_train(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(list(argv))
    try:
        if args.command == "recipe":
            from app.training.recipe import run_from_args

            report = run_from_args(args)
        elif args.command == "span-proxy":
            from app.training.span_proxy import run_from_args as run_span_proxy

            report = run_span_proxy(args)
        else:
            report = _tiny_smoke(args)
    except Exception as exc:  # one line, never a traceback
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    if args.command == "span-proxy" and not args.json:
        from app.training.span_proxy import describe

        print(describe(report))
        return 0
    print(json.dumps(report))
    return 0
