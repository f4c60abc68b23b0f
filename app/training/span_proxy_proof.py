"""The proof's one run (`python main.py train span-proxy`): the proxy LM trained on the span
task from scratch (span_proxy.py: the task, its training and its measures), evaluated on
torch and, with `--engines torch,mlx`, saved as a checkpoint and evaluated again on the MLX
engine (span_proxy_mlx.py); one JSON-able report, each number's meaning beside it, and the
command that reproduces it.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from app.checkpoints.catalog import Manifest, SpanWrapping
from app.engine.mlx.checkpoint import MLX_PRECISIONS  # a name list: mlx is imported on use
from app.training.span_proxy import (
    DEEP_GAP,
    FACT_FORMAT,
    KEY_WORDS,
    MAX_DISTANCE,
    MOSHI_MAX_PERIOD,
    QUESTION_FRAMES,
    SPLIT_SEEDS,
    TINY_LAYERS,
    VALUE_WORDS,
    ProxyTask,
    SpanLedger,
    build_proxy_lm,
    curriculum,
    evaluate,
    proxy_batches,
    proxy_lm_config,
    train_proxy,
)
from app.training.span_proxy_checkpoint import save_proxy_checkpoint

DEFAULT_STEPS = 1200
DEFAULT_QUESTIONS = 100
DEFAULT_THREADS = 1

# What each number of the report means (printed with it, under "meaning").
MEANING = {
    "command": "the command that reproduces every number of this report (same seed, same "
               "step budget, same --threads: the same numbers, only `wall` differs)",
    "training.steps": "the step budget: training stops after exactly this many optimizer "
                      "steps, whatever the wall clock says",
    "training.answer_loss_first/last": "text cross-entropy on the answer frames, averaged "
                                       "over the first/last `averaged_over_steps` steps",
    "eval_overlap": "evaluation spans (of overlap_check.eval_spans, every span the evaluation "
                    "injected) whose content occurs verbatim as a run of tokens inside a "
                    "training span (of overlap_check.training_spans, every span trained on); "
                    "0 means none was seen in training",
    "eval.split": "eval: facts and seeds kept for reporting; dev: the ones choices are made on",
    "eval.chunked": "one fact per span, fresh questions, greedy LMGen, the span injected in one "
                    "prefill pass: exact = the whole answer right (the key echo and every value "
                    "word), first_token = the value's first word right",
    "eval.one_at_a_time": "the same questions and streams, the span prefilled one position at "
                          "a time; identical_streams/identical_tokens = fraction of streams/"
                          "text tokens equal to the chunked run's",
    "eval.no_span": "the same questions, no span injected (answering without reading)",
    "eval.wrong_span": "the same questions, another episode's span injected",
    "eval.value_chance": "1 / number of value words: guessing a value's first word",
    "eval.distances": "exact match with the question d frames after the span (d = 0 .. 4x "
                      "max_distance_trained)",
    "eval.deep": "one long conversation, each span after a gap longer than the context (the "
                 "attention rings have wrapped): exact and first-token accuracy",
    "eval.multi_fact.P": "spans of P facts, each key of a span asked in its own stream: "
                         "first_token = the asked value's first word (chance_1_over_p = picking "
                         "one of the span's values at random), any_value_first_token = some "
                         "value of the span said, key_echo = the asked key's word said first",
    "engines": "exact match (eval.chunked.exact), first-token accuracy, and no-span / "
               "wrong-span / deep exact match per engine and precision: torch is the model "
               "in memory (fp32); mlx is the same model saved as a checkpoint, converted by "
               "the MLX engine's loader and run through MlxLmGen (greedy, each span ONE "
               "forward through the MLX transformer and KV ring), on the same questions "
               "and streams",
    "engines.mlx.P.agreement_with_torch_fp32": "tokens: fraction of the text tokens of "
                                               "every stream of every measure equal to torch "
                                               "fp32's; answers: fraction of the questions "
                                               "(all measures) whose answer window is "
                                               "identical to torch fp32's",
    "engines.mlx.P.eval": "the whole eval section, measured on MLX at precision P",
    "checkpoint": "where the trained LM was saved in the real checkpoint layout (the MLX "
                  "evaluation loads it from there)",
    "threads": "torch threads (fixed: the numbers depend on it, never on the machine's load); "
               "MLX on a CPU computes on one thread (its reference BLAS) whatever the load",
    "wall": "the only machine-dependent part: seconds, steps/s and CPU seconds of this "
            "process, load average (1, 5, 15 min) at the start and the end",
}



def machine() -> dict:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
        cpu = names[0] if names else cpu
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "torch": torch.__version__,
            "platform": platform.platform()}


def _print_progress(steps: int) -> Callable[[int, float, float], None]:
    def show(step: int, answer_loss: float, seconds: float) -> None:
        print(f"span-proxy: step {step}/{steps}, answer loss {answer_loss:.3f}, "
              f"{seconds:.0f} s ({step / seconds:.2f} steps/s)", file=sys.stderr, flush=True)
    return show


def load_average() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


@dataclass(frozen=True)
class EngineCheck:
    """Save the trained LM as a checkpoint in the real layout (the base's Mimi and
    tokenizer beside it) and evaluate it on MLX at `mlx_precisions` too."""

    manifest: Manifest  # the base checkpoint (tiny): its loader settings and span wrapping
    base_folder: Path
    mlx_precisions: tuple[str, ...] = ()
    save_to: Path | None = None  # None: a temporary folder, removed after the run


def headline(results: dict) -> dict:
    """One engine's main figures, from its eval section."""
    out = {"exact": results["chunked"]["exact"],
           "first_token": results["chunked"]["first_token"],
           "no_span_exact": results["no_span"]["exact"],
           "wrong_span_exact": results["wrong_span"]["exact"]}
    if "deep" in results:
        out["deep_exact"] = results["deep"]["exact"]
    return out


def run_proof(sp, wrapping: SpanWrapping, *, max_span_tokens: int = 128, steps: int,
              batch_size: int, lr: float, facts: int = 1, key_echo: bool = False,
              single_until: float = 0.0, episodes: int = 2, values: int = 64,
              value_words: int = VALUE_WORDS, deep_from: float = 0.6,
              max_period: int = MOSHI_MAX_PERIOD, layers: int = TINY_LAYERS, questions: int,
              seed: int, threads: int = DEFAULT_THREADS, split: str = "eval",
              deep: bool = True, distances: bool = True,
              multi_pairs: Sequence[int] = (2, 4), progress: bool = False,
              engines: EngineCheck | None = None) -> dict:
    """Train from scratch for `steps` steps, evaluate on `split`; one JSON-able report.
    `progress`: a line on stderr every 100 steps (the numbers do not depend on it).
    `engines`: also save the trained LM as a checkpoint and evaluate it on MLX."""
    if steps < 1 or threads < 1:
        raise ValueError("steps and threads must be at least 1")
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(threads)  # a fixed count: the same arithmetic on any load
    try:
        load_start = load_average()
        lm = build_proxy_lm(seed, max_period=max_period, layers=layers)
        task = ProxyTask(sp, lm.card, lm.text_padding_token_id, wrapping, max_span_tokens,
                         seed, values, key_echo, value_words)
        ledger = SpanLedger()
        phases = curriculum(facts, deep_from, single_until, episodes if deep else 1)
        batches = [(p.until, proxy_batches(task, batch_size, p.facts, p.episodes, seed + i,
                                           ledger, p.ask_all))
                   for i, p in enumerate(phases)]
        trained = train_proxy(lm, batches, steps, lr,
                              on_progress=_print_progress(steps) if progress else None)
        start, cpu_start = time.perf_counter(), time.process_time()
        results, torch_eval = evaluate(lm, task, questions, seed, split, multi_pairs, deep,
                                       distances)
        spans = torch_eval.spans
        eval_seconds = time.perf_counter() - start
        eval_cpu_seconds = time.process_time() - cpu_start
        engine_figures: dict = {"torch": {"fp32": headline(results)}}
        checked: dict = {}
        mlx_seconds: dict = {}
        if engines is not None:
            lm_config = proxy_lm_config(max_period=max_period, layers=layers)
            model_id = {"sig": f"contextspan-span-proxy-seed{seed}-steps{steps}",
                        "trained_from": engines.manifest.id, "steps": steps}
            with tempfile.TemporaryDirectory(prefix="span-proxy-") as scratch:
                folder = save_proxy_checkpoint(lm, lm_config, engines.base_folder,
                                               engines.save_to or Path(scratch) / "span-proxy",
                                               model_id)
                checked["checkpoint"] = (str(folder) if engines.save_to else
                                         "a temporary folder, removed after the run")
                if engines.mlx_precisions:
                    from app.training.span_proxy_mlx import evaluate_on_mlx

                    mlx, mlx_seconds = evaluate_on_mlx(
                        engines.manifest, folder, lm, task, torch_eval,
                        engines.mlx_precisions, questions, seed, split, multi_pairs, deep,
                        distances)
                    engine_figures["mlx"] = {
                        p: headline(r["eval"]) | {
                            "agreement_with_torch_fp32": r["agreement_with_torch_fp32"],
                            "eval": r["eval"]}
                        for p, r in mlx.items()}
        window = max(1, min(20, trained.steps // 4))
        return {
            "model": {"config": "catalog tiny architecture; context changed",
                      "dim": lm.dim, "layers": len(lm.transformer.layers),
                      "rope_max_period": max_period,
                      "params": sum(p.numel() for p in lm.parameters()),
                      "context": lm.context},
            "task": {"keys": len(KEY_WORDS), "values": len(task.value_words),
                     "split": "facts (key, value) by hash: 6/8 train, 1/8 dev, 1/8 eval",
                     "value_words": task.words_per_value, "question_frames": QUESTION_FRAMES,
                     "fact_format": FACT_FORMAT, "key_echo": key_echo,
                     "episodes_per_deep_sequence": episodes if deep else 1,
                     "deep_gap_frames": list(DEEP_GAP), "max_distance_trained": MAX_DISTANCE},
            "training": {"steps": trained.steps, "batch_size": batch_size, "lr": lr,
                         "curriculum": [vars(p) | {"facts": list(p.facts)} for p in phases],
                         "answer_loss_first": round(sum(trained.losses[:window]) / window, 4),
                         "answer_loss_last": round(sum(trained.losses[-window:]) / window, 4),
                         "averaged_over_steps": window, "seed": seed},
            "threads": torch.get_num_threads(),
            "eval_overlap": ledger.occurring(spans),
            "overlap_check": {"eval_spans": len(spans), "training_spans": ledger.spans},
            "eval": results,
            "engines": engine_figures,
            **checked,
            # The only fields that depend on the machine's load: everything else is the same
            # in two runs of the same arguments. CPU seconds (this process's, on `threads`
            # threads) are about what the wall clock reads on a quiet machine.
            "wall": {"train_seconds": round(trained.seconds, 1),
                     "train_steps_per_second": round(trained.steps / trained.seconds, 2),
                     "train_cpu_seconds": round(trained.cpu_seconds, 1),
                     "eval_seconds": round(eval_seconds, 1),
                     "eval_cpu_seconds": round(eval_cpu_seconds, 1),
                     **({"mlx_eval_seconds": mlx_seconds} if mlx_seconds else {}),
                     "load_average": {"start": load_start, "end": load_average()}},
            "machine": machine(),
            "meaning": MEANING,
        }
    finally:
        torch.set_num_threads(previous_threads)


# ---- `python main.py train span-proxy` ---------------------------------------------------


@dataclass(frozen=True)
class Recipe:
    """The training defaults of one configuration, chosen on the dev split."""

    steps: int
    deep_from: float
    single_until: float = 0.0  # key selection: one fact per span until this fraction
    key_echo: bool = False  # the answer starts with the key's word


READING = Recipe(steps=DEFAULT_STEPS, deep_from=0.6)  # one fact per span: the proof
KEY_SELECTION = Recipe(steps=3000, deep_from=0.9, single_until=0.35, key_echo=True)


def _int_list(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true",
                        help="print the report as one JSON object (without it: the main "
                             "figures as text)")
    parser.add_argument("--steps", type=int, default=None,
                        help=f"training step budget (default {READING.steps}; with --facts "
                             f"above 1, {KEY_SELECTION.steps}); the wall time is reported")
    parser.add_argument("--facts", type=int, default=1,
                        help="facts per span, up to: above 1, key selection (a curriculum "
                             "of 1..N facts, every key asked, the answer starts with the "
                             "key's word)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=5e-3)
    parser.add_argument("--values", type=int, default=64, help="size of the value vocabulary")
    parser.add_argument("--value-words", type=int, default=VALUE_WORDS,
                        help="words per value (1: an easier task that a short run learns)")
    parser.add_argument("--deep-from", type=float, default=None,
                        help="fraction of the budget after which training adds deep spans "
                             f"(default {READING.deep_from}; key selection "
                             f"{KEY_SELECTION.deep_from})")
    parser.add_argument("--episodes", type=int, default=2,
                        help="episodes per deep training conversation (the later ones deep)")
    parser.add_argument("--questions", type=int, default=DEFAULT_QUESTIONS,
                        help="fresh questions per measurement")
    parser.add_argument("--multi-pairs", default="2,4",
                        help="facts per span to evaluate ('': no multi-fact measure)")
    parser.add_argument("--no-distances", action="store_true",
                        help="skip the measure at 0..4x the largest trained distance")
    parser.add_argument("--no-deep", action="store_true",
                        help="no deep conversations, in training or in the evaluation")
    parser.add_argument("--split", choices=sorted(SPLIT_SEEDS), default="eval",
                        help="the facts and seeds to measure on: dev to choose, eval to report")
    parser.add_argument("--threads", type=int, default=DEFAULT_THREADS,
                        help="torch threads: results depend on it, never on the load")
    parser.add_argument("--single-until", type=float, default=None,
                        help="key selection: fraction of the budget trained on one fact per "
                             f"span first (default {KEY_SELECTION.single_until})")
    parser.add_argument("--layers", type=int, default=TINY_LAYERS,
                        help=f"transformer layers of the proxy LM (the catalog tiny's: "
                             f"{TINY_LAYERS})")
    parser.add_argument("--max-period", type=int, default=MOSHI_MAX_PERIOD,
                        help="RoPE max period of the proxy LM (real Moshi's: 10000)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--progress", action="store_true",
                        help="a line on stderr every 100 training steps")
    parser.add_argument("--engines", default="torch",
                        help="evaluate on these engines: torch (the reference, always), or "
                             "torch,mlx: the trained LM saved as a checkpoint, converted and "
                             "run on the MLX engine's LM too, each measure again")
    parser.add_argument("--mlx-precisions", default="fp32,q8,q4",
                        help=f"with --engines torch,mlx: the MLX weights to evaluate, of "
                             f"{', '.join(MLX_PRECISIONS)} (default fp32,q8,q4)")
    parser.add_argument("--save-checkpoint", type=Path, default=None, metavar="FOLDER",
                        help="save the trained LM as a checkpoint in the real layout (config."
                             "json, model.safetensors, the tiny's Mimi and tokenizer) here")


def parse_engines(engines: str, precisions: str) -> tuple[str, ...]:
    """The MLX precisions to evaluate ((): torch only), or a ValueError saying why not."""
    names = [e.strip() for e in engines.split(",") if e.strip()]
    unknown = sorted(set(names) - {"torch", "mlx"})
    if unknown or "torch" not in names:
        raise ValueError(f"--engines {engines!r}: torch (always, the reference) and "
                         "optionally mlx, e.g. torch,mlx")
    if "mlx" not in names:
        return ()
    chosen = tuple(dict.fromkeys(p.strip() for p in precisions.split(",") if p.strip()))
    wrong = [p for p in chosen if p not in MLX_PRECISIONS]
    if wrong or not chosen:
        raise ValueError(f"--mlx-precisions {precisions!r}: choose from "
                         f"{', '.join(MLX_PRECISIONS)}")
    try:
        import mlx.core  # noqa: F401
    except ImportError as exc:
        raise ValueError(f"--engines mlx: mlx does not import here ({exc}); on Linux "
                         "pip install 'mlx[cpu]'") from exc
    return chosen


def run_from_args(args: argparse.Namespace) -> dict:
    from app.checkpoints.catalog import get_manifest
    from app.checkpoints.loader import ensure_built, load_checkpoint

    mlx_precisions = parse_engines(args.engines, args.mlx_precisions)  # before training
    # The tiny checkpoint lends its SentencePiece tokenizer and span wrapping (through the
    # app's loader); the proxy LM itself is built fresh from `proxy_lm_config`.
    manifest = get_manifest("tiny")
    folder = ensure_built(manifest)
    checkpoint = load_checkpoint(manifest, folder, device="cpu")
    engines = (EngineCheck(manifest, folder, mlx_precisions, args.save_checkpoint)
               if mlx_precisions or args.save_checkpoint else None)
    if mlx_precisions:
        from app.training.span_proxy_mlx import check_mlx_loads

        check_mlx_loads(manifest, folder, mlx_precisions)
    recipe = KEY_SELECTION if args.facts > 1 else READING
    steps = args.steps or recipe.steps
    deep_from = recipe.deep_from if args.deep_from is None else args.deep_from
    single_until = recipe.single_until if args.single_until is None else args.single_until
    report = run_proof(
        checkpoint.tokenizer, manifest.span_wrapping, max_span_tokens=manifest.max_span_tokens,
        steps=steps, batch_size=args.batch_size, lr=args.lr,
        facts=args.facts, key_echo=recipe.key_echo, single_until=single_until,
        episodes=args.episodes, values=args.values, value_words=args.value_words,
        deep_from=deep_from,
        max_period=args.max_period, layers=args.layers, questions=args.questions,
        seed=args.seed,
        threads=args.threads, split=args.split, deep=not args.no_deep,
        distances=not args.no_distances, multi_pairs=_int_list(args.multi_pairs),
        progress=args.progress, engines=engines,
    )
    return {"command": reproducing_command(args, steps, deep_from, single_until)} | report


def reproducing_command(args: argparse.Namespace, steps: int, deep_from: float,
                        single_until: float) -> str:
    """The command line of this run with every default written out."""
    options = [
        ("--steps", steps), ("--facts", args.facts), ("--batch-size", args.batch_size),
        ("--lr", args.lr), ("--values", args.values), ("--value-words", args.value_words),
        ("--deep-from", deep_from), ("--episodes", args.episodes),
        ("--questions", args.questions), ("--multi-pairs", f"'{args.multi_pairs}'"),
        ("--split", args.split), ("--threads", args.threads),
        ("--single-until", single_until), ("--max-period", args.max_period),
        ("--layers", args.layers), ("--seed", args.seed),
    ]
    words = ["python main.py train span-proxy --json"]
    words += [f"{flag} {value}" for flag, value in options]
    words += [flag for flag, on in (("--no-distances", args.no_distances),
                                    ("--no-deep", args.no_deep)) if on]
    if "mlx" in args.engines:
        words += [f"--engines {args.engines}", f"--mlx-precisions {args.mlx_precisions}"]
    return " ".join(words)


def describe(report: dict) -> str:
    """The report's main figures as text: the training, then one row per engine and
    precision (exact match and its agreement with torch fp32)."""
    ev = report["eval"]
    lines = [
        f"span-proxy: {report['training']['steps']} steps, split {ev['split']}, "
        f"{ev['questions_per_measure']} questions per measure, eval_overlap "
        f"{report['eval_overlap']} (of {report['overlap_check']['eval_spans']} spans)",
        f"{'engine':7} {'weights':8} {'exact':>6} {'first':>6} {'no span':>8} "
        f"{'wrong':>6} {'deep':>6}  agreement with torch fp32 (tokens, answers)",
    ]
    for engine, by_precision in report["engines"].items():
        for precision, row in by_precision.items():
            agree = row.get("agreement_with_torch_fp32")
            deep = f"{row['deep_exact']:6.3f}" if "deep_exact" in row else f"{'-':>6}"
            lines.append(
                f"{engine:7} {precision:8} {row['exact']:6.3f} {row['first_token']:6.3f} "
                f"{row['no_span_exact']:8.3f} {row['wrong_span_exact']:6.3f} {deep}  "
                + (f"{agree['tokens']:.4f}, {agree['answers']:.4f}" if agree else "reference"))
    if "checkpoint" in report:
        lines.append(f"checkpoint: {report['checkpoint']}")
    wall = report["wall"]
    lines.append(f"wall: train {wall['train_seconds']} s, torch eval {wall['eval_seconds']} s"
                 + "".join(f", mlx {p} eval {t} s"
                           for p, t in wall.get("mlx_eval_seconds", {}).items())
                 + f"; load average {wall['load_average']}")
    lines.append(f"reproduce: {report['command']}")
    return "\n".join(lines)
