"""The command line: `python main.py [command]`.

With no command it launches the desktop app. Errors are one line on stderr that names the
log, and a non-zero exit; the traceback goes to the log (app/log_setup.py), not the terminal.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import logging
import os
import queue
import re
import shutil
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from app.bench.requests import (  # light: no torch until a benchmark runs
    BENCHMARKS,
    AsrBench,
    AudioLatencyBench,
    EchoBench,
    EngineBench,
    GpuBench,
    InjectionBench,
    JoinsBench,
    MimiBench,
    PipelineBench,
    PlaybackDelayBench,
    ServerBench,
    SoakBench,
    StepBench,
)
from app.cli.plan_command import add_plan_parser, run_plan  # light: no torch until it runs
from app.command_options import add_options, from_args  # light
from app.conversation.command_line import add_conversation_options  # light
from app.conversation.options import LLM_SIDE, RUN, SPEECH
from app.conversation.run_request import HeadlessRun, Injection  # light: no torch
from app.install_kind import is_engine_module_missing, needs_full_install
from app.library_noise import quiet_library_noise
from app.log_setup import configure_logging, log_path
from app.paths import REPO_ROOT

if TYPE_CHECKING:
    from app.asr.stt_catalog import SttManifest
    from app.checkpoints.catalog import Manifest
    from app.checkpoints.downloader import CheckpointDownloader, DownloadResult

EXIT_USAGE = 2
EXIT_FAILURE = 1
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report Ctrl+C
CANCEL_GRACE_S = 2.0  # after Ctrl+C, how long a download may take to stop at a chunk's end
# Qt platforms that need no display server; anything else needs DISPLAY or WAYLAND_DISPLAY.
HEADLESS_QT_PLATFORMS = ("offscreen", "minimal", "minimalegl", "eglfs", "linuxfb", "vnc",
                         "vkkhrdisplay")

log = logging.getLogger(__name__)


def contextspan_version() -> str:
    """The installed package's version, else pyproject.toml's (a source checkout)."""
    try:
        return importlib.metadata.version("contextspan")
    except importlib.metadata.PackageNotFoundError:
        pass
    try:
        text = (REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8")
    except OSError:
        return "unknown"
    found = re.search(r'^\[project\][^\[]*?^version\s*=\s*"([^"]+)"', text, re.M | re.S)
    return found.group(1) if found else "unknown"


class OneLineErrorParser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse's hook
        self.exit(EXIT_USAGE, f"error: {message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineErrorParser(
        prog="python main.py",
        description="ContextSpan: a full-duplex voice assistant with Context Spanning "
                    "injection. Without a command it opens the desktop app; none of the "
                    "commands below opens it (they run headless).",
        epilog=f"The log is written to {log_path()}.",
    )
    parser.add_argument("--version", action="version",
                        version=f"ContextSpan {contextspan_version()}")
    parser.add_argument("--debug", action="store_true",
                        help="print debug logging on the terminal too (anywhere on the "
                             "command line)")
    parser.add_argument("--screenshot", type=Path, default=None, metavar="FILE.png",
                        help="render the app on the tiny demo model with a short scripted "
                             "conversation to FILE.png, then exit")
    commands = parser.add_subparsers(dest="command", parser_class=OneLineErrorParser)

    commands.add_parser("models", help="list the model catalog")
    commands.add_parser("train", help="fine-tune a checkpoint on span-injected conversations "
                                      "(python main.py train --help)")
    commands.add_parser("eval", help="reproduce the paper's tables: spoken QA (eval qa), a "
                                     "span-only QA set (eval make-set), Full-Duplex-Bench "
                                     "(eval fdb) (python main.py eval --help)")

    download = commands.add_parser(
        "download", help="download a model (or a speech recognition model) from Hugging "
                         "Face, for machines without a display")
    download.add_argument("model", help="catalog id: python main.py models, or an STT id "
                                        "such as kyutai-stt-1b-en_fr")
    download.add_argument("--folder", type=Path, default=None,
                          help="where to put it (default: the data dir, where the app and "
                               "`run` look)")

    build = commands.add_parser(
        "build", help="build a random-weight checkpoint (tiny, tiny-cs, moshi-7b-random, tiny-stt)"
    )
    build.add_argument("model", choices=["tiny", "tiny-cs", "moshi-7b-random", "tiny-stt"])
    build.add_argument("--out", type=Path, default=None, help="folder (default: the data dir)")
    build.add_argument("--seed", type=int, default=1234)

    run = commands.add_parser("run", help="process an audio file through the engine, headless")
    add_conversation_options(run, RUN, SPEECH, notes={
        "device": "or mlx: the MLX engine (mlx on Apple Silicon where it is installed)"})
    run.add_argument("--server", default=None, metavar="URL",
                     help="the speech model of a `serve` at URL instead of this computer's "
                          "(no torch needed here); --asr server: its speech recognition too")
    run.add_argument("--server-token", default=None, metavar="TOKEN",
                     help="the server's token (default $CONTEXTSPAN_SERVER_TOKEN, which "
                          "keeps it out of `ps`)")
    add_options(run, HeadlessRun)
    run.add_argument("--inject", action="append", default=[], metavar="TEXT",
                     help="span text to inject; pair each with --at")
    run.add_argument("--at", action="append", default=[], type=float, metavar="SECONDS",
                     help="when the preceding --inject lands (seconds into the input)")
    run.add_argument("--source", default="cli", help="source label of the injected spans")
    add_conversation_options(
        run.add_argument_group("the LLM side (speech recognition, LLM, tools)"), RUN, LLM_SIDE)

    from app.server.cli import add_serve_parser  # light: the server loads only when it runs

    add_serve_parser(commands)
    add_plan_parser(commands)

    bench = commands.add_parser("bench", help="benchmarks that print numbers")
    bench_kinds = bench.add_subparsers(dest="bench", parser_class=OneLineErrorParser)
    for kind, (request, kind_help) in BENCHMARKS.items():
        add_options(bench_kinds.add_parser(kind, help=kind_help), request)
    bench.set_defaults(bench_kinds=tuple(bench_kinds.choices))
    return parser


def _cmd_models() -> int:
    from app.checkpoints.catalog import load_catalog

    for manifest in load_catalog().values():
        where = manifest.hf_repo or manifest.builder or manifest.local_folder
        print(f"{manifest.id:16} {manifest.display_name}  [{where}]")
    return 0


def _cmd_build(args: argparse.Namespace) -> int:
    if args.model == "tiny-stt":
        from app.asr.stt_catalog import get_stt_manifest
        from app.asr.tiny_stt_builder import build_tiny_stt

        folder = args.out or get_stt_manifest("tiny-stt").default_folder()
        build_tiny_stt(folder, seed=args.seed)
        print(f"built tiny-stt in {folder}")
        return 0
    from app.checkpoints.builders import BUILDERS
    from app.checkpoints.catalog import get_manifest

    folder = args.out or get_manifest(args.model).default_folder()
    BUILDERS[args.model](folder, seed=args.seed)
    print(f"built {args.model} in {folder}")
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    from app.conversation.command_line import conversation_from_args
    from app.conversation.config import SERVER_STT, SpeechServer
    from app.conversation.headless import run_headless

    if args.asr == SERVER_STT and not args.server:
        raise ValueError("--asr server is the speech server's recognition: give --server URL")
    server = None
    if args.server:
        token = args.server_token or os.environ.get("CONTEXTSPAN_SERVER_TOKEN") or None
        server = SpeechServer(args.server, token)
    if len(args.inject) != len(args.at):
        raise ValueError("each --inject needs exactly one --at (and the other way round)")
    if args.chunk_limit is not None and args.chunk_limit < 1:
        raise ValueError("--chunk-limit must be at least 1")
    injections = [Injection(t, a, args.source) for t, a in zip(args.inject, args.at, strict=True)]
    config = conversation_from_args(args, server=server)
    summary = run_headless(config, from_args(HeadlessRun, args, injections=tuple(injections)))
    speed = summary.audio_seconds / max(summary.elapsed_seconds, 1e-9)
    print(
        f"processed {summary.audio_seconds:.2f} s of audio ({summary.frames} frames) in "
        f"{summary.elapsed_seconds:.2f} s ({speed:.2f}x real time); "
        f"{summary.spans} span(s) injected",
        file=sys.stderr,
    )
    return 0


def _cmd_bench_precisions(request: GpuBench, blocks: tuple[int, ...]) -> int:
    """`bench gpu --precision bf16,fp8,int4` (app/bench/precision_bench.py)."""
    from app.bench.precision_bench import (
        describe_precisions,
        parse_precisions,
        run_precision_bench,
    )

    assert request.precision is not None
    if request.dtype != "bfloat16" or request.slots or request.compile_step:
        raise ValueError("bench gpu --precision chooses each precision's dtype itself and "
                         "runs no slots and no compiled step: leave out --dtype, --slots and "
                         "--compile")
    def progress(row: dict) -> None:  # a time limit that cuts the run keeps what was measured
        print(f"precision {json.dumps(row)}", file=sys.stderr, flush=True)

    result = run_precision_bench(parse_precisions(request.precision), request.model,
                                 request.device, blocks, request.repeats,
                                 allow_cpu=request.allow_cpu, progress=progress)
    print(json.dumps(result) if request.json else describe_precisions(result))
    return 0


def _cmd_bench_pipeline(request: PipelineBench) -> int:
    from app.bench.pipeline_bench import run_pipeline_bench

    if request.turns < 1:
        raise ValueError("--turns must be at least 1")
    result = run_pipeline_bench(request.model, request.turns, request.device)
    if request.json:
        print(json.dumps(result))
        return 0
    print(f"{result['completed']}/{result['turns']} turns on {result['model']} "
          f"({result['device']}); spans injected within one frame: "
          f"{result['span_injected_within_one_frame']}")
    for stage, numbers in result["stages_ms"].items():
        print(f"  {stage:34} median {numbers['median']:9.2f} ms   p95 {numbers['p95']:9.2f} ms")
    for failure in result["failures"]:
        print(f"  failure: {failure}")
    return 0


def _cmd_serve(args: argparse.Namespace) -> int:
    from app.server.cli import run_serve

    return run_serve(args)


def _cmd_bench(args: argparse.Namespace) -> int:
    """`bench KIND`: its request (app/bench/requests.py), handed to its benchmark."""
    request = from_args(BENCHMARKS[args.bench][0], args)
    if isinstance(request, EngineBench):
        from app.bench.engine_bench import describe as describe_engine
        from app.bench.engine_bench import run_engine_bench

        result = run_engine_bench(request.models or ("tiny", "tiny-cs"), request.frames,
                                  request.rounds, request.baseline_tree)
        print(json.dumps(result) if request.json else describe_engine(result))
        return 0
    if isinstance(request, StepBench):
        from app.bench.step_bench import describe as describe_step
        from app.bench.step_bench import emit_line, run_step_bench

        default = "bf16" if str(request.device).startswith("cuda") else "fp32"
        precisions = tuple(p.strip() for p in (request.precision or default).split(",")
                           if p.strip())
        result = run_step_bench(request.models or ("tiny-cs", "7b"), precisions,
                                request.device, request.steps, request.greedy, emit=emit_line,
                                compile_step=request.compile_step)
        print(json.dumps(result) if request.json else describe_step(result))
        return 0
    if isinstance(request, AsrBench):
        from app.bench.asr_rows_bench import describe as describe_asr
        from app.bench.asr_rows_bench import run_asr_rows_bench

        counts = tuple(int(n) for n in request.rows.split(",") if n.strip())
        result = run_asr_rows_bench(request.stt, counts, request.frames)
        print(json.dumps(result) if request.json else describe_asr(result))
        return 0
    if isinstance(request, PipelineBench):
        return _cmd_bench_pipeline(request)
    if isinstance(request, (AudioLatencyBench, EchoBench)):
        from app.bench.audio_bench import run_echo_bench, run_latency_bench

        if request.seconds <= 0:
            raise ValueError("--seconds must be positive")
        run = run_latency_bench if isinstance(request, AudioLatencyBench) else run_echo_bench
        print(json.dumps(run(seconds=request.seconds, null_sink=not request.system_devices),
                         indent=2))
        return 0
    if isinstance(request, PlaybackDelayBench):
        from app.bench.playback_delay_bench import describe as describe_delay
        from app.bench.playback_delay_bench import run_playback_delay_bench

        if request.seconds <= 0 or request.listener_ms < 0:
            raise ValueError("--seconds must be positive, --listener-ms 0 or more")
        result = run_playback_delay_bench(request.seconds, request.listener_ms)
        print(json.dumps(result) if request.json else describe_delay(result))
        return 0
    if isinstance(request, MimiBench):
        from app.bench.mimi_bench import describe as describe_mimi
        from app.bench.mimi_bench import run_mimi_bench

        mimi_result = run_mimi_bench(request.model, request.frames)
        print(json.dumps(mimi_result) if request.json else describe_mimi(mimi_result))
        return 0
    if isinstance(request, SoakBench):
        from app.bench.soak_bench import run_soak_bench

        if request.minutes <= 0:
            raise ValueError("--minutes must be positive")
        result = run_soak_bench(request.minutes)
        print(json.dumps(result) if request.json else json.dumps(result, indent=2))
        return 0
    if isinstance(request, ServerBench):
        from app.server.bench import format_server_bench, run_server_bench

        if request.frames < 5 or request.most < 0 or request.threads < 1:
            raise ValueError("--frames must be at least 5, --most 0 or more, --threads 1 "
                             "or more")
        result = run_server_bench(request.model, request.device, request.frames, request.most,
                                  threads=request.threads, asr=request.asr)
        print(json.dumps(result) if request.json else format_server_bench(result))
        return 0
    if isinstance(request, JoinsBench):
        from app.bench.joins_bench import run as run_joins

        return run_joins(request)
    if isinstance(request, GpuBench):
        from app.bench.gpu_bench import describe, run_gpu_bench

        blocks = request.blocks or (16, 64, 256, 400, 600)
        if request.precision is not None:
            return _cmd_bench_precisions(request, blocks)
        slot_counts = tuple(int(n) for n in request.slots.split(",") if n.strip()) \
            if request.slots else ()
        result = run_gpu_bench(request.model, request.device, request.dtype, blocks,
                               request.repeats, allow_cpu=request.allow_cpu, slots=slot_counts,
                               slot_frames=request.slot_frames,
                               stop_at_first_miss=request.slots_until_miss, asr=request.asr,
                               compile_step=request.compile_step)
        print(json.dumps(result) if request.json else describe(result))
        return 0
    assert isinstance(request, InjectionBench)
    ks = request.k or (16, 64, 256)
    if min(ks) < 1:
        raise ValueError("--k must be at least 1")
    if request.device == "mlx" and request.dtype is not None:
        raise ValueError("--device mlx takes --precision (fp32, bf16, q8, q4), not --dtype")
    if request.device != "mlx" and request.precision is not None:
        raise ValueError("--precision is for --device mlx; the torch bench takes --dtype")
    from app.bench.injection_bench import describe as describe_injection
    from app.bench.injection_bench import run_injection_bench

    result = run_injection_bench(request.model, request.device, request.dtype, ks,
                                 request.repeats, check_wrap=not request.no_wrap,
                                 precision=request.precision)
    print(json.dumps(result) if request.json else describe_injection(result))
    return 0


# ---- download ----------------------------------------------------------------------------


def _downloadable_manifest(model_id: str) -> Manifest | SttManifest:
    """A speech model's or an STT's catalog entry, if it comes from Hugging Face."""
    from app.asr.stt_catalog import load_stt_catalog
    from app.checkpoints.catalog import CatalogError, load_catalog

    entries: dict[str, Manifest | SttManifest] = {**load_stt_catalog(), **load_catalog()}
    manifest = entries.get(model_id)
    if manifest is None:
        known = ", ".join(sorted(k for k, m in entries.items() if m.hf_repo))
        raise CatalogError(f"unknown model {model_id!r} (downloadable: {known})")
    if not manifest.hf_repo:
        how = ("it is built on this machine (python main.py build --help)"
               if manifest.builder else f"it is read from {manifest.default_folder()}")
        raise CatalogError(f"{model_id!r} is not on Hugging Face: {how}")
    return manifest


@dataclass(frozen=True)
class _Planned:
    total: int
    on_disk: int
    files: int


@dataclass(frozen=True)
class _Progress:
    done: int
    total: int
    name: str


@dataclass(frozen=True)
class _Finished:
    result: DownloadResult | None
    error: Exception | None


_DownloadEvent = _Planned | _Progress | _Finished


class _ProgressLine:
    """Download progress: one line redrawn in place on a terminal, a line per 10 % when
    stderr is a file or a pipe."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.redraw = stream.isatty()
        self.done = 0
        self.total = 0
        self._started: float | None = None
        self._start_done = 0
        self._last_step = -1
        self._last_draw = 0.0
        self._drawn = 0  # characters on the line being redrawn

    def update(self, done: int, total: int, name: str) -> None:
        from app.checkpoints.downloader import format_bytes

        now = time.monotonic()
        if self._started is None:
            self._started, self._start_done = now, done
        self.done, self.total = done, total
        percent = 100 * done // total if total else 100
        elapsed = now - self._started
        rate = f"  {format_bytes((done - self._start_done) / elapsed)}/s" if elapsed > 0 else ""
        text = f"{percent:3d}%  {format_bytes(done)} of {format_bytes(total)}{rate}  {name}"
        if self.redraw:
            if now - self._last_draw < 0.1 and done < total:
                return
            self._last_draw = now
            text = text[: shutil.get_terminal_size().columns - 1]  # a wrapped line stays
            self.stream.write("\r" + text.ljust(self._drawn))
            self._drawn = len(text)
        elif percent // 10 > self._last_step:
            self._last_step = percent // 10
            self.stream.write(text + "\n")
        self.stream.flush()

    def note(self, text: str) -> None:
        """Replace the redrawn line with a word (nothing when lines are not redrawn)."""
        if self.redraw:
            self.stream.write("\r" + text.ljust(self._drawn))
            self.stream.flush()
            self._drawn = max(self._drawn, len(text))

    def end_line(self) -> None:
        if self._drawn:
            self.stream.write("\n")
            self.stream.flush()
            self._drawn = 0


def _fetch(downloader: CheckpointDownloader, cancel: threading.Event, events: queue.Queue) -> None:
    """The download thread: plan, fetch, verify; every outcome goes to `events`."""
    try:
        plan = downloader.plan()
        events.put(_Planned(plan.total_bytes, plan.bytes_on_disk, len(plan.files)))
        result = downloader.download(
            plan, cancel=cancel, on_progress=lambda d, t, n: events.put(_Progress(d, t, n)))
        events.put(_Finished(result, None))
    except Exception as exc:  # the main thread reports it
        events.put(_Finished(None, exc))


def _follow(events: queue.Queue, worker: threading.Thread, progress: _ProgressLine,
            folder: Path, deadline: float | None = None) -> _Finished | None:
    """Draw what the download thread reports until it finishes (None: the deadline came)."""
    from app.checkpoints.downloader import format_bytes

    while True:
        wait = 0.2 if deadline is None else min(0.2, deadline - time.monotonic())
        if wait <= 0:
            return None
        try:
            event: _DownloadEvent = events.get(timeout=wait)
        except queue.Empty:
            if not worker.is_alive() and events.empty():
                return _Finished(None, RuntimeError("the download thread ended unexpectedly"))
            continue
        if isinstance(event, _Finished):
            return event
        if isinstance(event, _Planned):
            here = f"; {format_bytes(event.on_disk)} already here" if event.on_disk else ""
            print(f"{format_bytes(event.total)} in {event.files} file(s) into {folder}{here}",
                  file=sys.stderr)
        else:
            progress.update(event.done, event.total, event.name)


def _cmd_download(args: argparse.Namespace) -> int:
    from huggingface_hub.utils import disable_progress_bars

    from app.checkpoints.downloader import CheckpointDownloader, format_bytes

    manifest = _downloadable_manifest(args.model)
    downloader = CheckpointDownloader.for_manifest(
        manifest, args.folder, endpoint=os.environ.get("HF_ENDPOINT") or None)
    disable_progress_bars()  # huggingface_hub's own bars: ours is drawn instead
    print(f"{manifest.id}: asking {downloader.hub_url} for {manifest.hf_repo}",
          file=sys.stderr)
    cancel = threading.Event()
    events: queue.Queue[object] = queue.Queue()  # _fetch's reports
    # A daemon: a transfer stalled on the network must not keep a cancelled process alive.
    worker = threading.Thread(target=_fetch, args=(downloader, cancel, events),
                              name="download", daemon=True)
    worker.start()
    progress = _ProgressLine(sys.stderr)
    try:
        finished = _follow(events, worker, progress, downloader.folder)
    except KeyboardInterrupt:
        cancel.set()  # the thread stops at the end of the chunk in flight
        finished = _wait_for_cancel(events, worker, progress, downloader.folder)
        if finished is None or finished.result is None:
            return EXIT_INTERRUPTED
    progress.end_line()
    assert finished is not None  # with no deadline, _follow returns the outcome
    if finished.error is not None:
        raise finished.error
    result = finished.result
    assert result is not None
    skipped = (f"; not on the hub, skipped: {', '.join(result.skipped)}"
               if result.skipped else "")
    print(f"{manifest.id} is ready in {result.folder}: {len(result.verified)} file(s) "
          f"verified, {format_bytes(result.fetched_bytes)} fetched{skipped}")
    return 0


def _wait_for_cancel(events: queue.Queue, worker: threading.Thread, progress: _ProgressLine,
                     folder: Path) -> _Finished | None:
    """After Ctrl+C: give the download a moment to stop cleanly, then say what is kept.
    Returns the outcome when the download finished after all (it was at its last chunk)."""
    from app.checkpoints.downloader import DownloadCancelled, format_bytes

    progress.note("cancelling…")
    try:
        finished = _follow(events, worker, progress, folder,
                           deadline=time.monotonic() + CANCEL_GRACE_S)
    except KeyboardInterrupt:  # a second Ctrl+C: wait no longer
        finished = None
    if finished is not None and finished.result is not None:
        return finished
    progress.end_line()
    if finished is not None and isinstance(finished.error, DownloadCancelled):
        message = str(finished.error)  # the downloader's own count of what is kept
    else:  # still in flight (a stalled read), or it failed meanwhile
        if finished is not None:
            log.info("after the cancel the download ended with %r", finished.error)
        message = (f"Download cancelled. {format_bytes(progress.done)} of "
                   f"{format_bytes(progress.total)} is kept in {folder}; the next download "
                   "resumes from there.")
    log.info("%s", message)
    print(message, file=sys.stderr)
    return finished


# ---- entry --------------------------------------------------------------------------------


def _take_debug_flag(argv: list[str]) -> tuple[bool, list[str]]:
    """`--debug` may stand anywhere before a `--`; it is taken out before parsing, so that
    logging is set up before anything else runs (and `train`'s own parser never sees it)."""
    end = argv.index("--") if "--" in argv else len(argv)
    debug = "--debug" in argv[:end]
    return debug, [a for a in argv[:end] if a != "--debug"] + argv[end:]


def _no_display_reason() -> str | None:
    """Why Qt would abort on this machine (Linux without a display server), or None."""
    if not sys.platform.startswith("linux"):
        return None
    platforms = os.environ.get("QT_QPA_PLATFORM", "").replace(";", ":").lower().split(":")
    if any(p.strip() in HEADLESS_QT_PLATFORMS for p in platforms):
        return None
    if os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"):
        return None
    return ("no display: DISPLAY and WAYLAND_DISPLAY are not set, so the desktop app cannot "
            "open. Start it from a desktop session, or under a virtual display with "
            "`xvfb-run python main.py`; the headless commands need none: run, bench, "
            "download (python main.py --help)")


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _guarded(action: Callable[[], int], what: str, log_file: Path) -> int:
    """Run a command: a failure is one line on stderr naming the log, its traceback in it."""
    try:
        return action()
    except KeyboardInterrupt:
        log.info("%s: interrupted", what)
        print("error: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:
        log.exception("%s failed", what)
        if is_engine_module_missing(exc):  # the thin client's install: say what to do
            print(f"error: {needs_full_install(f'`python main.py {what}`')}", file=sys.stderr)
            return EXIT_FAILURE
        print(f"error: {_one_line(exc)} (details: {log_file})", file=sys.stderr)
        return EXIT_FAILURE


def main(argv: list[str] | None = None) -> int:
    debug, argv = _take_debug_flag(list(sys.argv[1:] if argv is None else argv))
    log_file = configure_logging(debug)
    quiet_library_noise()  # ALSA's lines and torch's no-CUDA notice: the log, not the terminal
    log.info("python main.py %s (ContextSpan %s)", argv[0] if argv else "(the app)",
             contextspan_version())
    if argv and argv[0] == "train":  # its own parser: python main.py train --help
        from app.training.cli import main_train

        return _guarded(lambda: main_train(argv[1:]), "train", log_file)
    if argv and argv[0] == "eval":  # its own parser: python main.py eval --help
        from app.eval.cli import main_eval

        return _guarded(lambda: main_eval(argv[1:]), "eval", log_file)
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        if args.screenshot is None and (reason := _no_display_reason()):
            log.error("%s", reason)
            print(f"error: {reason}", file=sys.stderr)
            return EXIT_FAILURE
        try:
            from app.ui.app import run_app

            return run_app(screenshot=args.screenshot)
        except Exception as exc:  # one line, not a traceback
            log.exception("the desktop app could not start")
            print(f"error: the desktop app could not start: {_one_line(exc)} "
                  f"(details: {log_file})", file=sys.stderr)
            return EXIT_FAILURE
    if args.command == "bench" and args.bench is None:
        print(f"error: choose a benchmark: {', '.join(args.bench_kinds)} "
              "(see python main.py bench --help)", file=sys.stderr)
        return EXIT_USAGE
    handlers = {"models": lambda: _cmd_models(), "build": lambda: _cmd_build(args),
                "run": lambda: _cmd_run(args), "bench": lambda: _cmd_bench(args),
                "download": lambda: _cmd_download(args), "serve": lambda: _cmd_serve(args),
                "plan": lambda: run_plan(args)}
    return _guarded(handlers[args.command], args.command, log_file)
