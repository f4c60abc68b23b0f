"""`eval fdb3 run DIR --provider NAME`: every sample through the whole pipeline, its result
written beside its input as the benchmark's own runner does.

Each sample's input.wav (plus 6 s of silence, as the Context Spanning reference gives the
agent time to answer) goes through the speech model, the speech recogniser, the
orchestrator and the LLM, whose only tools are the benchmark's 12, served by our MCP server
(mock_server.py, started for the sample through the app's MCP client and gone after it),
at the 1.0x frame clock: the LLM's and the tools' latencies are replayed as conversation
time, so the timestamps are those of a real-time conversation on any machine. A sample is
done when its `result_<provider>.json` exists (written last, whole): an interrupted run
resumes where it stopped (`--force` runs them again). A sample that cannot be read or run is
reported and skipped; three failures before any success stop the run (a wrong model or LLM
fails every sample the same way).

`--llm standin` plays the stand-in LLM (app/llm/ollama_standin.py) over the real Ollama wire
protocol, making the calls the demo's samples carry (make_demo.py): the whole path on a CPU.

Deterministic with a scripted LLM, however busy the machine: the span chunk limit is fixed
(`--chunk-limit`, never measured per sample), the stand-in declares its latency and our
mock server its tools' (replay_clock.py counts those, not the machine's time), and the
result file holds no wall-clock figure (the run's times are in `fdb3_run_<provider>.json`).
A sample in which the recogniser never ended a user's turn (so the LLM was never asked) is
a failed sample, not a result: a run where that happens to every sample fails.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from app.audio_file import AudioFileError, read_mono_24k
from app.conversation.config import ConversationConfig
from app.conversation.run_request import HeadlessRun
from app.eval.fdb3.agent_prompt import AgentPromptBackend, agent_prompt
from app.eval.fdb3.layout import (
    Fdb3Sample,
    find_samples,
)
from app.eval.fdb3.mock_apis import LATENCY_PROFILES
from app.eval.fdb3.mock_server import SERVER_NAME, input_schemas
from app.eval.fdb3.result import make_result, user_turns, voiced_end
from app.eval.fdb3.run_options import STANDIN, Fdb3RunOptions
from app.eval.progress import ProgressBar
from app.eval.qa_events import read_transcript
from app.frames import FRAME_RATE, SAMPLE_RATE
from app.llm_backends import OLLAMA
from app.settings.schema import McpServerSettings

FAILURES_BEFORE_STOP = 3
STANDIN_MODEL = "standin:latest"
RUN_SUMMARY = "fdb3_run_{provider}.json"


class Fdb3RunError(RuntimeError):
    pass


@dataclass
class Fdb3RunReport:
    samples: int = 0
    ran: int = 0
    already_done: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)
    stopped: str | None = None
    no_user_turn: list[str] = field(default_factory=list)  # failed: no user turn detected
    elapsed_s: dict[str, float] = field(default_factory=dict)  # wall time per sample run

    @property
    def never_heard(self) -> bool:
        """No sample the run ran had a user turn (and none was done before): the
        recogniser or its options are wrong."""
        return bool(self.no_user_turn) and self.ran == 0 and self.already_done == 0


class NoUserTurn(Fdb3RunError):
    """The recogniser never ended a user's turn in the sample: the LLM was never asked."""


def mock_server_settings(profile: str, log: Path | None = None) -> McpServerSettings:
    """Our MCP server of the 12 APIs, as the app's MCP client starts a user's server; its
    tools may all run (the benchmark's environment authorises them)."""
    import app

    args = ["-m", "app.eval.fdb3.mock_server", "--latency", profile]
    if log is not None:
        args += ["--log", str(log)]
    env: tuple[str, ...] = ()
    if not getattr(sys, "frozen", False):  # the server imports this checkout's `app`
        env = (f"PYTHONPATH={Path(app.__file__).resolve().parent.parent}",)
    return McpServerSettings(name=SERVER_NAME, command=sys.executable, args=tuple(args),
                             env=env, consent="always", timeout_s=60.0)


def standin_plan(sample: Fdb3Sample) -> Any:
    """The stand-in's script for a demo sample (its `contextspan_standin`)."""
    from app.llm.ollama_standin import PlannedCall, ToolPlanScript

    plan = sample.scenario.get("contextspan_standin")
    if not isinstance(plan, dict):
        raise Fdb3RunError(f"{sample.folder.name} has no stand-in plan: --llm standin plays "
                           "the demo's samples (eval fdb3 make-demo); a real set needs a "
                           "real LLM (--llm ollama or openai)")
    rounds = [[PlannedCall(c["function"], c.get("args", {})) for c in step]
              for step in plan.get("rounds", [])]
    return ToolPlanScript(rounds, str(plan.get("answer", "")))


@contextmanager
def _standin_server(options: Fdb3RunOptions) -> Iterator[Any]:
    if options.llm != STANDIN:
        yield None
        return
    from app.llm.ollama_standin import OllamaStandIn

    with OllamaStandIn(models=(STANDIN_MODEL,)) as standin:
        yield standin


def _conversation(options: Fdb3RunOptions, host: str | None) -> ConversationConfig:
    conversation = options.conversation
    if options.llm == STANDIN:
        return replace(conversation, backend=OLLAMA, host=host or "", model=STANDIN_MODEL,
                       tools=())
    return replace(conversation, backend=options.llm, tools=())


def latency_profile(sample: Fdb3Sample, default: str) -> str:
    """The mock APIs' latency for `sample`: its scenario's `latency_profile`, else `default`;
    an unknown one is refused (it would silently run as another)."""
    profile = sample.scenario.get("latency_profile")
    if profile in (None, ""):
        return default
    if profile not in LATENCY_PROFILES:
        raise Fdb3RunError(f"{sample.folder.name}: its latency_profile {str(profile)[:40]!r} "
                           f"is not one of {', '.join(LATENCY_PROFILES)}")
    return str(profile)


def _write_json(path: Path, payload: dict) -> None:
    """Whole or not at all: a run killed mid-write leaves no half file behind."""
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(json.dumps(payload, ensure_ascii=False, indent=1), encoding="utf-8")
    os.replace(partial, path)


def run_fdb3(root: Path, options: Fdb3RunOptions, stream: TextIO | None = None
             ) -> Fdb3RunReport:
    """Run every sample under `root` not done yet (all of them with `force`)."""
    from app.conversation.assembly import load_speech_model, load_stt_model
    from app.conversation.headless import HeadlessRunError

    options.check()
    stream = stream if stream is not None else sys.stderr
    prompt = agent_prompt(options.system_prompt)
    samples, left_out = find_samples(root, options.benchmark)
    if options.limit:
        samples = samples[: options.limit]
    report = Fdb3RunReport(samples=len(samples), failed=list(left_out))
    for name, why in left_out:
        print(f"[fdb3] left out {name}: {why}", file=stream)
    unknown = []
    for sample in samples:  # before anything runs: not hours in, one sample at a time
        try:
            latency_profile(sample, options.latency)
        except Fdb3RunError as exc:
            unknown.append(str(exc))
    if unknown:
        raise Fdb3RunError("; ".join(unknown[:5]) + (f"; and {len(unknown) - 5} more"
                                                     if len(unknown) > 5 else ""))
    todo = [s for s in samples if options.force or not s.result_path(options.provider).is_file()]
    report.already_done = len(samples) - len(todo)
    if report.already_done:
        print(f"[fdb3] {report.already_done} sample(s) already done, resuming", file=stream)
    if not todo:
        return _summarise(root, options, report)
    schemas = input_schemas()  # a call's arguments are typed by them (typed_arguments.py)
    with _standin_server(options) as standin:
        conversation = _conversation(options, standin.url if standin else None)
        checkpoint = load_speech_model(conversation)
        stt = load_stt_model(conversation, checkpoint.device)
        bar = ProgressBar(len(samples), stream, f"fdb3/{options.provider}")
        for _ in range(report.already_done):
            bar.advance("resumed", timed=False)
        for sample in todo:
            started = time.perf_counter()
            try:
                if standin is not None:
                    standin.script = standin_plan(sample)
                _run_sample(sample, options, conversation, checkpoint, stt, prompt, schemas)
            except (AudioFileError, HeadlessRunError, Fdb3RunError, OSError) as exc:
                report.failed.append((sample.folder.name, str(exc)))
                if isinstance(exc, NoUserTurn):
                    report.no_user_turn.append(sample.folder.name)
                bar.message(f"[fdb3] SKIPPED {sample.folder.name}: {exc}")
                bar.advance("failed")
                if report.ran == 0 and len(report.failed) - len(left_out) >= FAILURES_BEFORE_STOP:
                    report.stopped = (f"the first {FAILURES_BEFORE_STOP} samples all failed "
                                      f"(last: {exc}); check the model and LLM options")
                    print(f"[fdb3] stopping: {report.stopped}", file=stream)
                    break
                continue
            finally:
                report.elapsed_s[sample.folder.name] = round(time.perf_counter() - started, 3)
            report.ran += 1
            bar.advance(sample.example_id)
    if report.never_heard:
        report.stopped = (f"no user turn was detected in any of the {len(report.no_user_turn)} "
                          "sample(s) run: the speech recogniser never ended a user's turn, so "
                          "the LLM was never asked (check --asr; --vad ends turns by voice "
                          "activity)")
        print(f"[fdb3] {report.stopped}", file=stream)
    return _summarise(root, options, report)


def _summarise(root: Path, options: Fdb3RunOptions, report: Fdb3RunReport) -> Fdb3RunReport:
    options_json = {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(options).items()}
    _write_json(Path(root) / RUN_SUMMARY.format(provider=options.provider),
                {"options": options_json, **asdict(report)})
    return report


def _run_sample(sample: Fdb3Sample, options: Fdb3RunOptions, conversation: ConversationConfig,
                checkpoint: Any, stt: Any, prompt: str,
                schemas: dict[str, dict[str, Any]]) -> None:
    from app.conversation.assembly import build_backend, engine_options
    from app.conversation.headless import run_conversation

    heard = read_mono_24k(sample.input)
    pcm = np.concatenate([heard, np.zeros(int(options.tail_s * SAMPLE_RATE), np.float32)])
    profile = latency_profile(sample, options.latency)
    forced: frozenset[int] = frozenset()
    # Where a random-weight <ret> checkpoint is made to ask: it must be chosen before the
    # run, so from the input's loudness (the result's user end is the recogniser's).
    voiced = voiced_end(heard)
    if options.force_ret_after_s is not None and voiced is not None:
        forced = frozenset({int((voiced + options.force_ret_after_s) * FRAME_RATE)})
    engine = engine_options(conversation, seed=options.seed, forced_ret_frames=forced,
                            chunk_limit=options.chunk_limit)
    provider = options.provider
    with tempfile.TemporaryDirectory(prefix=".fdb3-", dir=sample.folder) as scratch:
        tmp = Path(scratch)
        calls_log = tmp / "mock_calls.jsonl"
        config = replace(conversation, mcp_servers=(mock_server_settings(profile, calls_log),))
        backend = AgentPromptBackend(build_backend(config), prompt)
        run = HeadlessRun(sample.input, tmp / "output.wav", tmp / "run.jsonl",
                          timeout_s=options.timeout_s)
        summary = run_conversation(checkpoint, pcm, config, run, engine, stt=stt,
                                   backend=backend)
        records = read_transcript(tmp / "run.jsonl")
        os.replace(tmp / "run.jsonl", sample.run_log_path(provider))
        os.replace(tmp / "output.wav", sample.output_path(provider))
        turns = user_turns(records)
        if not turns:
            raise NoUserTurn(
                f"no user turn was detected in its input: the speech recogniser "
                f"({config.stt_model}) never ended one, so the LLM was never asked (see "
                f"{sample.run_log_path(provider).name})")
        result = make_result(sample.example_id, sample.speaker, sample.scenario, provider,
                             records, heard, {
                                 "model": config.model_id, "seed": options.seed,
                                 "llm": options.llm, "llm_model": config.model,
                                 "asr": config.stt_model, "latency_profile": profile,
                                 "chunk_limit": options.chunk_limit,
                                 "tail_s": options.tail_s, "frames": summary.frames,
                                 "spans": summary.spans, "user_turns": len(turns),
                                 "run_log": sample.run_log_path(provider).name,
                                 "output": sample.output_path(provider).name}, schemas)
        _write_json(sample.result_path(provider), result)  # last: it marks the sample done
