"""Score rendered Full-Duplex-Bench v1 samples with our own listeners and metric code.

Each sample folder under the output root that holds `output.wav` is listened to (our STT's
words, and Silero VAD segments for backchannel), judged by the v1 rules in `metrics.py`, and
its words are written beside it as `contextspan_asr.json` in the benchmark's transcript
format (the name is chosen so the benchmark's scripts, which look for `output.json`, never
mistake it for theirs). Per-task results go to `fdb_scores.json` and `fdb_scores.md` at the
output root.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from app.audio_file import AudioFileError, audio_file_rate, read_mono_24k
from app.command_options import cli_option
from app.eval.fdb import metrics
from app.eval.fdb.judge import RelevanceJudge
from app.eval.fdb.layout import OUTPUT, Kind, Sample, find_samples, kind_of
from app.eval.fdb.metrics import Segment, Word
from app.eval.fdb.timeline_audio import SEGMENT_RATE
from app.eval.judge_settings import JudgeSettings
from app.frames import SAMPLE_RATE as ENGINE_RATE

ASR_RECORD = "contextspan_asr.json"
SCORES_JSON = "fdb_scores.json"
SCORES_MD = "fdb_scores.md"
DEFAULT_STT = "kyutai-stt-1b-en_fr"


class SampleScoreError(ValueError):
    """A sample that cannot be scored (a missing or malformed annotation)."""


@dataclass(frozen=True)
class ScoreOptions:
    """`eval fdb`'s scoring; the flags of its own are declared here (app/command_options.py),
    its device and tasks are the rendering's."""

    stt: str = field(default=DEFAULT_STT, metadata=cli_option(
        "--stt", help="our STT for the word timestamps (models/stt)"))
    device: str | None = None
    tasks: tuple[str, ...] = ()
    # the benchmark's icc_gt_distribution.json
    backchannel_reference: Path | None = field(default=None, metadata=cli_option(
        "--backchannel-reference", metavar="JSON",
        help="the benchmark's icc_gt_distribution.json, for backchannel JSD"))
    judge: JudgeSettings | None = None
    # Backchannel segments as the benchmark's script hears them: output.wav's samples at the
    # file's own rate, told 16 kHz (stretched times for a 24 kHz file). Default: true times.
    official_rates: bool = field(default=False, metadata=cli_option(
        "--fdb-official-rates",
        help="backchannel: hand Silero output.wav's samples at the file's own rate, told 16 "
             "kHz, as the benchmark's script does (a 24 kHz file, as the reference rendered, "
             "is heard time-stretched: the paper's numbers). Default: at 16 kHz, true times"))


@dataclass(frozen=True)
class Listeners:
    """What turns a reply into words and segments (swappable in tests)."""

    words: Callable[[np.ndarray, float], list[Word]]  # (24 kHz audio, offset s) -> words
    segments: Callable[[np.ndarray, int], list[Segment]]  # (24 kHz audio, rate heard at)
    asr_name: str


def load_listeners(stt_id: str, device: str | None) -> Listeners:
    from app.asr.stt_catalog import ensure_stt_built, get_stt_manifest, load_stt
    from app.asr.vad import load_silero_model
    from app.engine.device import choose_device
    from app.eval.fdb.listen import voiced_segments, words_of

    manifest = get_stt_manifest(stt_id)
    stt = load_stt(manifest, ensure_stt_built(manifest), choose_device(device))
    vad_model = load_silero_model()
    return Listeners(lambda pcm, offset: words_of(stt, pcm, offset),
                     lambda pcm, heard_rate: voiced_segments(pcm, vad_model, heard_rate),
                     stt_id)


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _annotation(sample: Sample, name: str) -> Any:
    path = sample.folder / name
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise SampleScoreError(f"{name} is missing") from exc
    except (OSError, ValueError) as exc:
        raise SampleScoreError(f"{name} cannot be read: {exc}") from exc


def _first_event(sample: Sample, name: str) -> dict:
    data = _annotation(sample, name)
    try:
        event = data[0]
        float(event["timestamp"][0]), float(event["timestamp"][1])
    except (LookupError, TypeError, ValueError) as exc:
        raise SampleScoreError(f"{name} has no [{{..., \"timestamp\": [start, end]}}] "
                               "event") from exc
    return event


def _write_asr(sample: Sample, words: list[Word], asr: str, offset_s: float) -> None:
    record = {"text": " ".join(w.text for w in words),
              "chunks": [{"text": w.text, "timestamp": [w.start_s, w.end_s]} for w in words],
              "asr": asr, "offset_s": offset_s}
    (sample.folder / ASR_RECORD).write_text(json.dumps(record, indent=1, ensure_ascii=False)
                                            + "\n", encoding="utf-8")


def vad_description(official_rates: bool) -> str:
    """How the backchannel numbers heard the reply, for the results and the report."""
    if official_rates:
        return ("official rates (--fdb-official-rates): output.wav's samples at the file's "
                "own rate, told 16 kHz, as the benchmark's script does; a 24 kHz file's "
                "segments are 1.5 times too long and late, as in the paper's numbers")
    return "16 kHz: the reply resampled to the 16 kHz Silero is told (true times)"


def score_sample(sample: Sample, kind: Kind, listeners: Listeners,
                 human: dict | None, judge: RelevanceJudge | None,
                 official_rates: bool = False) -> dict:
    """One sample's verdict as a flat record."""
    try:
        pcm = read_mono_24k(sample.folder / OUTPUT)
    except AudioFileError as exc:
        raise SampleScoreError(str(exc)) from exc
    reply_s = len(pcm) / ENGINE_RATE
    record: dict[str, Any] = {"sample": str(sample.rel), "task": sample.task,
                              "kind": kind.value, "reply_s": round(reply_s, 3)}
    if kind is Kind.USER_INTERRUPTION:
        event = _first_event(sample, "interrupt.json")
        end = float(event["timestamp"][1])
        # As the benchmark does: transcribe only the reply after the interruption.
        start = min(len(pcm), round(end * ENGINE_RATE))
        words = listeners.words(pcm[start:], start / ENGINE_RATE)
        verdict = metrics.user_interruption(words, end)
        record |= {"user_end_s": end}
        if judge is not None and verdict.took_turn:
            after = [w.text for w in words if w.end_s > end]
            rating = judge.rate(str(event.get("context", "")),
                                str(event.get("interrupt", "")), " ".join(after))
            record |= {"rating": rating.value, "judge_reply": rating.reply}
        _write_asr(sample, words, listeners.asr_name, round(start / ENGINE_RATE, 4))
    else:
        words = listeners.words(pcm, 0.0)
        _write_asr(sample, words, listeners.asr_name, 0.0)
        if kind is Kind.PAUSE_HANDLING:
            verdict = metrics.pause_handling(words)
        elif kind is Kind.SMOOTH_TURN_TAKING:
            end = float(_first_event(sample, "turn_taking.json")["timestamp"][0])
            verdict = metrics.smooth_turn_taking(words, end)
            record |= {"user_end_s": end}
        else:
            assert kind is Kind.BACKCHANNEL
            reference = None if human is None else human.get(sample.id)
            heard_rate = SEGMENT_RATE
            if official_rates:
                try:
                    heard_rate = audio_file_rate(sample.folder / OUTPUT)
                except AudioFileError as exc:
                    raise SampleScoreError(str(exc)) from exc
            segments = listeners.segments(pcm, heard_rate)
            result = metrics.backchannel(segments, words, reply_s, reference)
            return record | {"took_turn": result.took_turn, "words": len(words),
                             "vad_heard_rate": heard_rate,
                             "backchannels": [[s.start_s, s.end_s] for s in result.backchannels],
                             "frequency": result.frequency, "jsd": result.jsd}
    return record | {"took_turn": verdict.took_turn, "latency_s": verdict.latency_s,
                     "words": verdict.words, "speech_s": round(verdict.speech_s, 3)}


def task_kinds(samples: list[Sample]) -> dict[str, Kind]:
    """Each task's kind: that of most of its samples (one sample missing its annotation
    is then a broken sample of the task, reported, not a task of its own)."""
    votes: dict[str, Counter] = {}
    for sample in samples:
        votes.setdefault(sample.task, Counter())[kind_of(sample)] += 1
    kinds = {}
    for task, counter in votes.items():
        known = Counter({k: n for k, n in counter.items() if k is not Kind.UNKNOWN})
        kinds[task] = (known or counter).most_common(1)[0][0]
    return kinds


def summarise(kind: Kind, records: list[dict]) -> dict:
    """A task's numbers from its samples' records (the benchmark's averages)."""
    tor = metrics.mean(float(r["took_turn"]) for r in records)
    if kind is Kind.PAUSE_HANDLING:
        return {"tor": tor}
    if kind is Kind.SMOOTH_TURN_TAKING:
        return {"tor": tor, "latency_s": metrics.mean(r["latency_s"] for r in records)}
    if kind is Kind.USER_INTERRUPTION:
        asked = [r for r in records if "rating" in r]
        return {"tor": tor, "rating": metrics.mean(r["rating"] for r in asked),
                "latency_s": metrics.mean(r["latency_s"] for r in records),
                "rated": sum(r["rating"] is not None for r in asked),
                "unrated": sum(r["rating"] is None for r in asked)}
    if kind is Kind.BACKCHANNEL:
        return {"tor": tor, "frequency": metrics.mean(r["frequency"] for r in records),
                "jsd": metrics.mean(r["jsd"] for r in records)}
    return {}


def _render_summary(out: Path) -> dict | None:
    from app.eval.fdb.render import RENDER_SUMMARY

    try:
        return json.loads((out / RENDER_SUMMARY).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # scored folders rendered by something else


def score_all(out: Path, options: ScoreOptions, listeners: Listeners | None = None,
              judge: RelevanceJudge | None = None,
              report: Callable[[str], None] = _stderr) -> dict:
    """Score every rendered sample under `out`; writes and returns the results."""
    from app.eval.fdb.report import ASR_NOTICE, markdown

    samples = find_samples(out, options.tasks, marker=OUTPUT)
    if not samples:
        raise FileNotFoundError(f"no rendered sample (*/output.wav) under {out}")
    human = None
    if options.backchannel_reference is not None:
        try:
            human = json.loads(Path(options.backchannel_reference).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ValueError(f"--backchannel-reference {options.backchannel_reference}: "
                             f"cannot read it ({exc})") from exc
        if not isinstance(human, dict):
            raise ValueError(f"--backchannel-reference {options.backchannel_reference}: "
                             "expected the benchmark's {sample id: [...]} object")
    if judge is None and options.judge is not None:
        backend = options.judge.client(temperature=0.0)
        health = backend.health()
        if not health.ok:
            raise RuntimeError(f"the judge is not available: {health.message}")
        judge = RelevanceJudge(backend)
    if listeners is None:
        report(f"[fdb] loading the listeners: STT {options.stt}, Silero VAD")
        listeners = load_listeners(options.stt, options.device)

    kinds = task_kinds(samples)
    by_task: dict[str, list[dict]] = {task: [] for task in kinds}
    skipped: list[dict] = []
    for index, sample in enumerate(samples, 1):
        kind = kinds[sample.task]
        if kind in (Kind.V1_5, Kind.UNKNOWN):
            continue
        prefix = f"[fdb] scoring {index}/{len(samples)} {sample.rel}"
        try:
            record = score_sample(sample, kind, listeners, human, judge,
                                  options.official_rates)
        except SampleScoreError as exc:
            skipped.append({"sample": str(sample.rel), "reason": str(exc)})
            report(f"{prefix}: SKIPPED: {exc}")
            continue
        by_task[sample.task].append(record)
        report(f"{prefix}: {kind.value}, took the turn: {record['took_turn']}")

    tasks = [{"task": task, "kind": kinds[task].value, "scored": len(records),
              "rendered": sum(1 for s in samples if s.task == task),
              "metrics": summarise(kinds[task], records)}
             for task, records in by_task.items()]
    judge_name = None
    if options.judge is not None:
        judge_name = f"{options.judge.backend} {options.judge.model or '(its default model)'}"
    elif judge is not None:
        judge_name = type(judge.backend).__name__
    results = {
        "asr": listeners.asr_name,
        "asr_notice": ASR_NOTICE.format(asr=listeners.asr_name),
        "judge": judge_name,
        "backchannel_vad": vad_description(options.official_rates),
        "official_rates": options.official_rates,
        "backchannel_reference": (str(options.backchannel_reference)
                                  if options.backchannel_reference else None),
        "render": _render_summary(out),
        "tasks": tasks,
        "skipped": skipped,
        "samples": [r for records in by_task.values() for r in records],
    }
    (out / SCORES_JSON).write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n",
                                   encoding="utf-8")
    (out / SCORES_MD).write_text(markdown(results, out), encoding="utf-8")
    return results
