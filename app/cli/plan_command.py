"""`python main.py plan`: what fits in this machine's memory before anything loads.

Without flags it plans for the app's saved settings (speech model, recogniser, Ollama model,
where the speech engine runs); flags override them. `--for cuda:12` plans for another
machine instead of this one.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from app.engine.memory_plan import GIB, PRECISIONS, DeviceMemory, MemoryReport
from app.llm_backends import LLM_BACKEND_NAMES, NO_LLM

DEVICE_KINDS = ("cuda", "mac", "cpu")


def add_plan_parser(commands: argparse._SubParsersAction) -> None:
    plan = commands.add_parser(
        "plan", help="what fits in memory: the speech model at the best precision, speech "
                     "recognition and the Ollama model, before anything loads")
    plan.add_argument("--model", default=None,
                      help="catalog id (default: the app's setting); 'none': the speech "
                           "engine runs on a server")
    plan.add_argument("--folder", type=Path, default=None, help="checkpoint folder")
    plan.add_argument("--device", default=None, help="cuda, mps or cpu (default: the app's)")
    plan.add_argument("--precision", default=None, choices=sorted(PRECISIONS),
                      help="plan for this precision (default: the best that fits)")
    plan.add_argument("--stt", default=None, metavar="STT_MODEL",
                      help="speech recognition model (default: the app's); 'none': none")
    plan.add_argument("--llm", choices=[*LLM_BACKEND_NAMES, NO_LLM], default=None,
                      help="LLM backend (default: the app's)")
    plan.add_argument("--llm-host", default=None, help="Ollama host (default: the app's)")
    plan.add_argument("--llm-model", default=None, help="Ollama model (default: the app's)")
    plan.add_argument("--for", dest="assume", default=None, metavar="KIND:GB",
                      help="plan for another machine instead of this one, all of its memory "
                           "free: cuda:12, cuda:16, mac:16, cpu:32")
    plan.add_argument("--json", action="store_true", help="print one JSON object")


def assumed_device(text: str) -> DeviceMemory:
    """"cuda:12" -> a made-up 12 GB CUDA card with all of its memory free."""
    kind, _, size = text.partition(":")
    try:
        gigabytes = float(size)
    except ValueError:
        gigabytes = 0.0
    if kind not in DEVICE_KINDS or gigabytes <= 0:
        raise ValueError(f"--for takes KIND:GB with KIND one of {', '.join(DEVICE_KINDS)} "
                         f"(e.g. cuda:12), not {text!r}")
    total = int(gigabytes * GIB)
    names = {"cuda": "A CUDA GPU", "mac": "A Mac", "cpu": "A CPU"}
    return DeviceMemory(kind, f"{names[kind]} with {size} GB (assumed)", total, total)


def report_json(report: MemoryReport) -> dict:
    def plan(p) -> dict:
        return {"sentence": p.sentence(), "fits": p.fits, "precision": p.precision,
                "total_bytes": p.total_bytes, "usable_bytes": p.usable_bytes,
                "parts": [{"label": part.label.rstrip(","), "bytes": part.bytes,
                           "estimated": part.estimated} for part in p.parts]}

    return {"device": report.device.describe(), **plan(report.plan),
            "suggestions": [{"change": s.change, **plan(s.plan)} for s in report.suggestions],
            "notes": list(report.notes)}


def run_plan(args: argparse.Namespace) -> int:
    from app.engine.memory_survey import survey_memory
    from app.settings.store import SettingsStore

    settings, _ = SettingsStore().load()
    model = args.model
    if model is None:
        model = settings.speech.model_id if settings.engine.mode == "local" else "none"
    folder = args.folder
    if folder is None and args.model is None and settings.speech.custom_folder:
        folder = Path(settings.speech.custom_folder).expanduser()
    device = args.device or (None if settings.speech.device == "auto" else settings.speech.device)
    report = survey_memory(
        None if model == "none" else model,
        folder=folder,
        device=device,
        device_memory=assumed_device(args.assume) if args.assume else None,
        precision=args.precision,
        stt_model=args.stt or settings.llm.stt_model,
        llm_backend=args.llm or settings.llm.backend,
        llm_host=args.llm_host or settings.llm.host,
        llm_model=args.llm_model or settings.llm.model,
    )
    if args.json:
        print(json.dumps(report_json(report)))
    else:
        print("\n".join(report.lines()))
    return 0
