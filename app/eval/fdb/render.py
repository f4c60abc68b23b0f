"""Render Full-Duplex-Bench samples: each `input.wav` through the engine, the reply written as
`output.wav` on the input's timeline in a mirror of the data tree, ready for the benchmark's
own scripts and for ours.

A sample is done when its `output.wav` exists (it is written last, whole or not at all),
so an interrupted run resumes where it stopped. A sample whose audio cannot be read is
reported and skipped; so is one the engine fails on, but three engine failures before any
success stop the run (a wrong voice or checkpoint would fail every sample the same way).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from app.audio_file import AudioFileError, read_mono_24k, write_wav_24k
from app.command_options import cli_option, comma_separated
from app.conversation.config import ConversationConfig
from app.conversation.run_request import HeadlessRun
from app.eval.fdb.layout import (
    CLEAN_INPUT,
    CLEAN_OUTPUT,
    INPUT,
    NOT_COPIED,
    OUTPUT,
    PROFILE_CITY,
    REFERENCE_SEED,
    Sample,
    find_samples,
    prompt_for,
)
from app.eval.fdb.timeline_audio import (
    ENGINE_RATE,
    SampleAudioError,
    audio_info,
    on_timeline,
    write_wav,
)

RUN_LOG = "contextspan_run.jsonl"  # run_headless's transcript of the reply (text stream)
CLEAN_RUN_LOG = "contextspan_clean_run.jsonl"
RENDER_RECORD = "contextspan_render.json"
RENDER_SUMMARY = "fdb_render.json"  # at the output root, beside (not inside) the task folders
ENGINE_FAILURES_BEFORE_STOP = 3
# A sample's conversation unless the command line says otherwise: the tiny demo model, the
# reference's profile city, no LLM side.
FDB_CONVERSATION = ConversationConfig(model_id="tiny", user_city=PROFILE_CITY)
RENDERING, VOICES = "rendering", "voices"  # the parts of `eval fdb`'s --help (RenderOptions)


@dataclass(frozen=True)
class RenderOptions:
    """`eval fdb`'s rendering; its flags are declared here (app/command_options.py), in
    the parts of its --help (`RENDERING`, `VOICES`; the others stand first)."""

    # The speech model (its `voice`: one for every sample, persona checkpoints) and the LLM
    # side (ASR, LLM, tools), as the reference renders with its whole stack; backend "none":
    # the speech model alone.
    conversation: ConversationConfig = FDB_CONVERSATION
    seed: int | None = field(default=REFERENCE_SEED, metadata=cli_option(
        "--seed", section=RENDERING,
        help=f"one seed for every sample (default: the reference's, {REFERENCE_SEED})"))
    # or one per sample, by a hash of its path (the reference)
    voice_pool: tuple[str, ...] = field(default=(), metadata=cli_option(
        "--voice-pool", section=VOICES, default="", to_field=comma_separated,
        help="comma-separated voices, one per sample by a hash of its path, as the reference "
             "does (it used f0,f1,f2)"))
    sample_rate: int = field(default=16000, metadata=cli_option(
        "--sample-rate", section=RENDERING, choices=(16000, ENGINE_RATE),
        help="rate of output.wav (default 16000, as the benchmark's examples)"))
    tasks: tuple[str, ...] = field(default=(), metadata=cli_option(
        "--tasks", default="", to_field=comma_separated,
        help="comma-separated task folders (default: all)"))
    limit: int = field(default=0, metadata=cli_option(  # samples per task; 0: all
        "--limit", help="samples per task (default: all)"))
    # Silence appended to each input (the reference appends 2 s): the reply may run on
    # past the user's last word. output.wav then outlasts input.wav by as much.
    tail_s: float = field(default=0.0, metadata=cli_option(
        "--tail-seconds", section=RENDERING, metavar="SECONDS",
        help="silence appended to each input, so the reply may run on past it (the "
             "reference appended 2 s; output.wav is then longer than input.wav by as much). "
             "Default 0: the input's length"))
    timeout_s: float = field(default=3600.0, metadata=cli_option(
        "--timeout", section=RENDERING, metavar="SECONDS",
        help="longest a sample may take to render"))
    chunk_limit: int | None = None  # most span positions a frame; None: see chunk_limit_for

    def chunk_limit_for(self) -> int | None:
        """Without an LLM side nothing is injected and the engine's per-frame span budget is
        never used: a fixed limit spares measuring it for every sample. With one, None (the
        engine measures what fits)."""
        if self.chunk_limit is not None or self.conversation.has_llm:
            return self.chunk_limit
        return 1


@dataclass(frozen=True)
class RenderReport:
    samples: int
    rendered: int
    already_done: int
    failed: tuple[tuple[str, str], ...]  # (sample path, reason)
    persona: bool  # False: the checkpoint has no persona start and the prompts were unused
    stopped: str | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)


def voice_for(sample: Sample, options: RenderOptions) -> str | None:
    if options.voice_pool:
        digest = hashlib.md5(str(sample.rel).encode()).hexdigest()
        return options.voice_pool[int(digest[:8], 16) % len(options.voice_pool)]
    return options.conversation.voice


def is_done(sample: Sample, out_folder: Path) -> bool:
    return (out_folder / OUTPUT).is_file() and (
        not sample.has_clean_input or (out_folder / CLEAN_OUTPUT).is_file())


def _limited(samples: list[Sample], limit: int) -> list[Sample]:
    if limit <= 0:
        return samples
    kept: list[Sample] = []
    per_task: dict[str, int] = {}
    for sample in samples:
        per_task[sample.task] = per_task.get(sample.task, 0) + 1
        if per_task[sample.task] <= limit:
            kept.append(sample)
    return kept


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def render_all(data: Path, out: Path, options: RenderOptions,
               runner: Callable | None = None,
               report: Callable[[str], None] = _stderr) -> RenderReport:
    """Render every sample under `data` into the same relative folder under `out`.

    `runner` has `app.conversation.headless.run_headless`'s signature (the default):
    (ConversationConfig, HeadlessRun)."""
    from app.checkpoints.catalog import get_manifest

    if runner is None:
        from app.conversation.headless import run_headless

        runner = run_headless
    model = options.conversation.model_id
    manifest = get_manifest(model)  # an unknown model fails before any work
    persona = manifest.conversation_start.kind == "persona_prompt"
    samples = _limited(find_samples(data, options.tasks), options.limit)
    out.mkdir(parents=True, exist_ok=True)
    notes = []
    if not persona:
        notes.append(f"{model} has no persona start: the benchmark prompts (and any "
                     "voice) are unused")
    for note in notes:
        report(f"[fdb] note: {note}")
    tasks = sorted({s.task for s in samples})
    report(f"[fdb] {len(samples)} sample(s) in {len(tasks)} task(s) under {data}")

    rendered = done_before = 0
    failed: list[tuple[str, str]] = []
    engine_failures = 0
    spent = 0.0
    stopped = None
    for index, sample in enumerate(samples, 1):
        target = out / sample.rel
        prefix = f"[fdb] {index}/{len(samples)} {sample.rel}"
        if is_done(sample, target):
            done_before += 1
            report(f"{prefix}: already rendered, skipped")
            continue
        started = time.perf_counter()
        try:
            seconds = _render_one(sample, out, options, persona, runner)
        except (SampleAudioError, AudioFileError) as exc:
            failed.append((str(sample.rel), str(exc)))
            report(f"{prefix}: SKIPPED, unreadable sample: {exc}")
            continue
        except Exception as exc:
            from app.conversation.headless import HeadlessRunError

            if not isinstance(exc, HeadlessRunError):
                raise
            failed.append((str(sample.rel), f"engine: {exc}"))
            report(f"{prefix}: FAILED in the engine: {exc}")
            engine_failures += 1
            if rendered == 0 and engine_failures >= ENGINE_FAILURES_BEFORE_STOP:
                stopped = (f"the first {engine_failures} samples all failed in the engine "
                           f"(last: {exc}); check the model and voice options")
                report(f"[fdb] stopping: {stopped}")
                break
            continue
        elapsed = time.perf_counter() - started
        rendered += 1
        spent += elapsed
        left = len(samples) - index
        eta = spent / rendered * left
        report(f"{prefix}: {seconds:.1f} s of audio in {elapsed:.1f} s "
               f"(ETA {int(eta // 60)}:{int(eta % 60):02d})")

    result = RenderReport(len(samples), rendered, done_before, tuple(failed), persona,
                          stopped, tuple(notes))
    summary = {"options": {"model": model, **asdict(options)},
               "data": str(data), **asdict(result)}
    (out / RENDER_SUMMARY).write_text(json.dumps(summary, indent=2, ensure_ascii=False) + "\n",
                                      encoding="utf-8")
    report(f"[fdb] rendered {rendered}, already done {done_before}, failed {len(failed)}")
    return result


def _render_one(sample: Sample, out: Path, options: RenderOptions, persona: bool,
                runner: Callable) -> float:
    """Render one sample into `out / sample.rel`; returns the input's duration in seconds.

    Everything is made in a scratch folder at the output root first (never inside a task
    folder, which the benchmark's scorers list): `target` only appears once the replies
    exist, so a failed sample leaves no folder those scorers would stumble on."""
    info = audio_info(sample.folder / INPUT)
    clean_info = audio_info(sample.folder / CLEAN_INPUT) if sample.has_clean_input else None
    prompt = prompt_for(sample) if persona else None
    voice = voice_for(sample, options) if persona else None
    target = out / sample.rel
    with tempfile.TemporaryDirectory(prefix=".fdb-scratch-", dir=out) as scratch:
        tmp = Path(scratch)

        tail = round(options.tail_s * options.sample_rate)

        def reply(source: str, name: str, length: int) -> object:
            heard = sample.folder / source
            if options.tail_s > 0:  # the input with its tail of silence, as the engine hears it
                pcm = read_mono_24k(heard)
                heard = tmp / f"{name}.input.wav"
                write_wav_24k(heard, np.concatenate(
                    [pcm, np.zeros(round(options.tail_s * ENGINE_RATE), np.float32)]))
            summary = runner(
                replace(options.conversation, voice=voice, role=prompt),
                HeadlessRun(heard, tmp / f"{name}.wav", tmp / f"{name}.jsonl",
                            seed=options.seed, chunk_limit=options.chunk_limit_for(),
                            timeout_s=options.timeout_s))
            pcm = on_timeline(read_mono_24k(tmp / f"{name}.wav"), length + tail,
                              options.sample_rate)
            write_wav(tmp / f"{name}.final.wav", pcm, options.sample_rate)
            return summary

        clean_summary = None
        if clean_info is not None:
            clean_summary = reply(CLEAN_INPUT, "clean", clean_info.samples_at(options.sample_rate))
        summary = reply(INPUT, "main", info.samples_at(options.sample_rate))

        target.mkdir(parents=True, exist_ok=True)
        for item in sorted(sample.folder.iterdir()):
            if item.is_file() and item.name not in NOT_COPIED and not item.name.startswith("."):
                shutil.copy2(item, target / item.name)
        record = {
            "model": options.conversation.model_id, "seed": options.seed, "voice": voice,
            "prompt": prompt, "prompt_used": persona, "sample_rate": options.sample_rate,
            "input_seconds": round(info.seconds, 3),
            "llm_side": options.conversation.has_llm,
            "spans": getattr(summary, "spans", None),
            "text": getattr(summary, "text", None),
            "clean_text": getattr(clean_summary, "text", None),
        }
        (target / RENDER_RECORD).write_text(json.dumps(record, indent=2, ensure_ascii=False)
                                            + "\n", encoding="utf-8")
        shutil.move(tmp / "main.jsonl", target / RUN_LOG)
        if clean_info is not None:
            shutil.move(tmp / "clean.jsonl", target / CLEAN_RUN_LOG)
            (tmp / "clean.final.wav").replace(target / CLEAN_OUTPUT)
        (tmp / "main.final.wav").replace(target / OUTPUT)  # last: it marks the sample done
    return info.seconds
