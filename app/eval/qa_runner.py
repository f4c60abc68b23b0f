"""`eval qa`'s run step: each item's question audio plus `tail_s` of silence through the whole
pipeline (engine, ASR, orchestrator, LLM and tools, injection), replaying the LLM's latency
in frames, so the transcript does not depend on the machine's speed.

Items go to `<out>/<set>/<arm>/<item id>/`: output.wav (the model's voice), transcript.jsonl
(every event), text.txt (the model's text stream), events.json (the triggers and their spans)
and item.json, written last: an item with item.json is done (`resume` skips it). An item
that cannot be run (unreadable audio, a stalled run) is reported and skipped.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TextIO

import numpy as np

from app.audio_file import AudioFileError, read_mono_24k
from app.command_options import cli_option
from app.conversation.assembly import (
    build_backend,
    engine_options,
    load_speech_model,
    load_stt_model,
)
from app.conversation.config import ConversationConfig
from app.conversation.headless import HeadlessRunError, run_conversation
from app.conversation.run_request import HeadlessRun
from app.eval.arm_backends import GoldPassageBackend, WithheldBackend
from app.eval.progress import ProgressBar
from app.eval.qa_events import read_transcript, ret_tokens, text_stream, trigger_events
from app.eval.qa_sets import QaItem, QaSet
from app.frames import FRAME_RATE, SAMPLE_RATE
from app.llm.backend import LLMBackend

log = logging.getLogger(__name__)

ARMS = ("inject", "no-inject", "gold")
TAIL_S = 14.0  # silence after the question: the answer's window (the reference's)
# item.json's question end, in seconds to this many decimals: the reference's (its ret_lat_s is
# measured from the rounded value, so a third decimal would move latencies by up to 0.01 s).
QUESTION_END_DECIMALS = 2
PROFILE_CITY = "Seoul"  # the reference's profile for every run
RET_DEADLINE_S = 10.0
# The conversation of an item unless the command line says otherwise: the tiny demo model,
# the 1B recogniser, the reference's profile city, and its benchmark's <ret> deadline (a
# reference is applied whenever it arrives; the live app's is the checkpoint's, 2.5 s).
QA_CONVERSATION = ConversationConfig(model_id="tiny", stt_model="kyutai-stt-1b-en_fr",
                                     user_city=PROFILE_CITY, ret_deadline_s=RET_DEADLINE_S)


QA_SEED = 42424242  # one seed for every item (the reference's results seed)
SPEECH_MODEL = "model"  # QaRunOptions' part of `eval qa`'s --help beside the speech model's


@dataclass(frozen=True)
class QaRunOptions:
    """How `eval qa` runs each item; its flags are declared here (app/command_options.py)."""

    # The speech model and the LLM side (backend "none": no LLM; the inject arm needs one).
    conversation: ConversationConfig = QA_CONVERSATION
    seed: int = field(default=QA_SEED, metadata=cli_option(
        "--seed", section=SPEECH_MODEL, help=f"one seed for every item (default {QA_SEED})"))
    arm: str = "inject"  # ARMS (`--inject`, `--no-inject`, `--gold`: one flag each)
    chunk_limit: int | None = field(default=None, metadata=cli_option(
        "--chunk-limit", section=SPEECH_MODEL,
        help="most span positions per frame (default: measured)"))
    limit: int = field(default=0, metadata=cli_option(  # first N items (0: all)
        "--limit", help="first N items of each set"))
    resume: bool = field(default=False, metadata=cli_option(
        "--resume", help="skip items already done"))
    tail_s: float = field(default=TAIL_S, metadata=cli_option(
        "--tail", metavar="SECONDS",
        help=f"silence after the question (default {TAIL_S:g}, the reference's)"))
    # Force the model's <ret> this long after the question ends: random-weight checkpoints
    # (tiny-cs) never ask on their own. None: the model decides.
    force_ret_after_s: float | None = field(default=None, metadata=cli_option(
        "--force-ret-after", section=SPEECH_MODEL, metavar="SECONDS",
        help="force the model's <ret> this long after the question ends (random-weight "
             "checkpoints never ask on their own)"))
    item_timeout_s: float = 1800.0


@dataclass
class RunReport:
    ran: int = 0
    resumed: int = 0
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0  # wall time of the items that ran


def arm_folder(out: Path, set_name: str, arm: str) -> Path:
    return Path(out) / set_name / arm


def is_done(item_folder: Path) -> bool:
    return (item_folder / "item.json").is_file()


def run_qa_set(qa_set: QaSet, out: Path, options: QaRunOptions,
               stream: TextIO | None = None) -> RunReport:
    """Run the set's items (those not done yet with `resume`) into `out`."""
    if options.arm not in ARMS:
        raise ValueError(f"unknown arm {options.arm!r} (choose from {', '.join(ARMS)})")
    if options.tail_s < 0:
        raise ValueError("--tail must not be negative")
    if options.arm == "inject" and not options.conversation.has_llm:
        raise ValueError("the inject arm asks an LLM: give --llm ollama or --llm openai")
    if options.arm == "gold" and not any(item.knowledge for item in qa_set.items):
        raise ValueError(f"{qa_set.name} has no gold passages (knowledge): --gold needs them")
    stream = stream if stream is not None else sys.stderr
    folder = arm_folder(out, qa_set.name, options.arm)
    folder.mkdir(parents=True, exist_ok=True)
    items = list(qa_set.items[: options.limit] if options.limit else qa_set.items)
    report = RunReport(problems=list(qa_set.problems))
    for problem in qa_set.problems:
        print(f"skipped {problem}", file=stream)
    description = {"set": qa_set.name, "layout": qa_set.layout, "arm": options.arm,
                   "judge": qa_set.judge, "options": _jsonable(asdict(options)),
                   "items": len(items)}
    _write_json(folder / "run.json", {**description, "problems": report.problems})
    todo = [item for item in items if not (options.resume and is_done(folder / item.item_id))]
    report.resumed = len(items) - len(todo)
    if report.resumed:
        print(f"{qa_set.name}/{options.arm}: {report.resumed} item(s) already done, "
              "resuming", file=stream)
    if todo:
        _Runner(qa_set, folder, options, stream, report).run(todo, len(items))
    _write_json(folder / "run.json", {**description, "problems": report.problems})
    return report


class _Runner:
    """What is slow to load (the checkpoint, the STT) is loaded once for all items."""

    def __init__(self, qa_set: QaSet, folder: Path, options: QaRunOptions, stream: TextIO,
                 report: RunReport) -> None:
        self.qa_set = qa_set
        self.folder = folder
        self.options = options
        self.stream = stream
        self.report = report

    def run(self, todo: list[QaItem], total: int) -> None:
        options = self.options
        conversation = self._conversation()
        checkpoint = load_speech_model(conversation)
        manifest, device = checkpoint.manifest, checkpoint.device
        stt = load_stt_model(conversation, device)
        # The LLM client is made per item: a conversation closes its clients when it ends.
        llm = (lambda: _backend(conversation)) \
            if options.conversation.has_llm and options.arm != "no-inject" else None
        trigger = manifest.retrieval.trigger if manifest.retrieval else "end_of_turn"
        bar = ProgressBar(total, self.stream, f"{self.qa_set.name}/{options.arm}")
        for _ in range(total - len(todo)):
            bar.advance("resumed", timed=False)
        for item in todo:
            started = time.perf_counter()
            try:
                self._run_item(item, checkpoint, conversation, stt, llm, trigger)
            except (AudioFileError, HeadlessRunError, OSError) as exc:
                problem = f"{item.item_id}: {exc}"
                self.report.problems.append(problem)
                log.warning("eval qa: %s", problem)
                bar.message(f"skipped {problem}")
                bar.advance("skipped")
                continue
            self.report.ran += 1
            self.report.seconds += time.perf_counter() - started
            bar.advance(item.item_id)

    def _conversation(self) -> ConversationConfig:
        conversation = self.options.conversation
        if self.qa_set.search_folder is None:
            return conversation
        # The set's facts: only local search finds them.
        tools = tuple(dict.fromkeys((*(conversation.tools or ()), "local_search")))
        return replace(conversation, tools=tools,
                       search_folders=(str(self.qa_set.search_folder),))

    def _run_item(self, item: QaItem, checkpoint, conversation: ConversationConfig, stt,
                  llm: Callable[[], LLMBackend] | None, trigger: str) -> None:
        o = self.options
        question = read_mono_24k(item.audio)
        question_end_s = len(question) / SAMPLE_RATE
        pcm = np.concatenate([question, np.zeros(int(o.tail_s * SAMPLE_RATE), np.float32)])
        backend: LLMBackend
        if o.arm == "gold" and item.knowledge:
            backend, reference = GoldPassageBackend(item.knowledge), "gold passage"
        elif o.arm == "no-inject" or llm is None:  # (gold arm: an item without a passage
            backend, reference = WithheldBackend(), "none"  # and no --llm gets nothing)
        else:
            backend, reference = llm(), "llm"
        forced: frozenset[int] = frozenset()
        if o.force_ret_after_s is not None:
            forced = frozenset({int((question_end_s + o.force_ret_after_s) * FRAME_RATE)})
        options = engine_options(conversation, seed=o.seed, chunk_limit=o.chunk_limit,
                                 forced_ret_frames=forced)
        folder = self.folder / item.item_id
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "item.json").unlink(missing_ok=True)  # not done until rewritten
        run = HeadlessRun(item.audio, folder / "output.wav", folder / "transcript.jsonl",
                          timeout_s=o.item_timeout_s)
        summary = run_conversation(checkpoint, pcm, conversation, run, options, stt=stt,
                                   backend=backend)
        records = read_transcript(folder / "transcript.jsonl")
        text = text_stream(records)
        (folder / "text.txt").write_text(text + "\n", encoding="utf-8")
        _write_json(folder / "events.json", {
            "transcript": text, "events": trigger_events(records),
            "ret_tokens": ret_tokens(records)})
        _write_json(folder / "item.json", {
            "set": self.qa_set.name, "id": item.item_id, "question": item.question,
            "answer": item.answer, "knowledge": item.knowledge,
            "question_start_s": 0.0, "question_end_s": round(question_end_s, QUESTION_END_DECIMALS),
            "arm": o.arm, "reference": reference, "trigger": trigger,
            "model": conversation.model_id,
            "seed": o.seed, "frames": summary.frames,
            "elapsed_s": round(summary.elapsed_seconds, 3), "audio": str(item.audio)})


def _backend(conversation: ConversationConfig) -> LLMBackend:
    """The item's LLM client; a backend that cannot be built skips the item, as a run
    that cannot be run does."""
    try:
        return build_backend(conversation)
    except ValueError as exc:
        raise HeadlessRunError(str(exc)) from exc


def _jsonable(value):
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return str(value) if isinstance(value, Path) else value


def _write_json(path: Path, payload: dict) -> None:
    """Whole or not at all: a run killed mid-write leaves no half file behind."""
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(json.dumps(payload, ensure_ascii=False, indent=1), encoding="utf-8")
    os.replace(partial, path)
