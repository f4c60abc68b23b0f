"""`python main.py plan`: what fits in this machine's memory before anything loads, and, on a
card it knows, which precision keeps the 7B in real time (predicted, with its basis:
app/plan/speed_plan.py).

Without flags it plans for the app's saved settings (speech model, recogniser, Ollama model,
where the speech engine runs); flags override them. `--for cuda:12` plans for another
machine instead of this one, `--card "RTX 4060 Ti"` for a card of the speed table, and
`--cards` adds the predictions for every common card.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from app.llm_backends import LLM_BACKEND_NAMES, NO_LLM
from app.plan.memory_plan import (
    DEVICE_PRECISIONS,
    GIB,
    PRECISIONS,
    DeviceMemory,
    MemoryReport,
    ModelShape,
)
from app.plan.slot_capacity import SlotCapacity

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
    plan.add_argument("--card", default=None, metavar="NAME",
                      help="plan for a card of the speed table instead of this machine, all "
                           "of its memory free, with its predicted speed (e.g. \"RTX 4060 "
                           "Ti\", \"RTX 4060\", \"M3 Pro\")")
    plan.add_argument("--cards", action="store_true",
                      help="also the 7B's predicted step and frame on common cards at each "
                           "precision, whether it fits, the 8 GB question, and the basis")
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


def card_device(name: str) -> DeviceMemory:
    """A card of the speed table (app/plan/speed_plan.py) with all of its memory free."""
    from app.plan.speed_plan import CARDS, find_card

    card = find_card(name)
    if card is None:
        known = ", ".join(alias for c in CARDS for alias in c.aliases)
        raise ValueError(f"--card {name!r} is not in the speed table (it has {known})")
    kind = "mac" if card.engine == "mlx" else "cuda"
    auto = tuple(p for p in DEVICE_PRECISIONS[kind] if p in card.precisions)  # as the app's
    return DeviceMemory(kind, card.name, card.memory_bytes, card.memory_bytes,
                        precisions=card.precisions, auto_precisions=auto)


def speed_lines(device: DeviceMemory, speech: ModelShape | None,
                stt: ModelShape | None) -> list[str]:
    """The predictions for this device's card at each precision it runs (empty: a card the
    table does not know, or a speech model that is not the 7B)."""
    from app.plan.memory_survey import SEVEN_B_LINEAR_PARAMS
    from app.plan.speed_plan import basis_short, find_card, fit_text, predict

    card = find_card(device.name)
    if card is None or speech is None or speech.linear_params < SEVEN_B_LINEAR_PARAMS:
        return []
    lines = [f"Predicted on {card.name} ({basis_short(card)}; python main.py plan --cards "
             "says how):"]
    for precision in card.precisions:
        lines.append(f"- {predict(card, precision).text()}; "
                     f"{fit_text(card, speech, stt, precision)}")
    return lines


def report_json(report: MemoryReport) -> dict:
    def plan(p) -> dict:
        return {"sentence": p.sentence(), "fits": p.fits, "precision": p.precision,
                "total_bytes": p.total_bytes, "usable_bytes": p.usable_bytes,
                "parts": [{"label": part.label.rstrip(","), "bytes": part.bytes,
                           "estimated": part.estimated} for part in p.parts]}

    recommendation = report.recommendation
    return {"device": report.device.describe(), **plan(report.plan),
            "suggestions": [{"change": s.change, **plan(s.plan)} for s in report.suggestions],
            "notes": list(report.notes),
            "recommendation": None if recommendation is None else {
                "precision": recommendation.precision, "why": recommendation.why}}


def run_plan(args: argparse.Namespace) -> int:
    from app.plan.memory_survey import survey_memory
    from app.settings.store import SettingsStore

    settings, _ = SettingsStore().load()
    model = args.model
    if model is None:
        model = settings.speech.model_id if settings.engine.mode == "local" else "none"
    folder = args.folder
    if folder is None and args.model is None and settings.speech.custom_folder:
        folder = Path(settings.speech.custom_folder).expanduser()
    device = args.device or (None if settings.speech.device == "auto" else settings.speech.device)
    if args.assume and args.card:
        raise ValueError("--for and --card both name the machine: give one")
    device_memory = (assumed_device(args.assume) if args.assume
                     else card_device(args.card) if args.card else None)
    report = survey_memory(
        None if model == "none" else model,
        folder=folder,
        device=device,
        device_memory=device_memory,
        precision=args.precision,
        stt_model=args.stt or settings.llm.stt_model,
        llm_backend=args.llm or settings.llm.backend,
        llm_host=args.llm_host or settings.llm.host,
        llm_model=args.llm_model or settings.llm.model,
    )
    speech, stt = _shapes(None if model == "none" else model, folder,
                          args.stt or settings.llm.stt_model)
    speed = speed_lines(report.device, speech, stt)
    slots = _slot_line(report, speech, stt)
    cards: list[str] = []
    if args.cards:
        from app.plan.speed_plan import card_table, eight_gb_lines

        seven_b = speech if speech is not None and speech.linear_params > 5e9 else _shapes(
            "context-spanning-7b", None, None)[0]
        assert seven_b is not None
        cards = card_table(seven_b, stt) + eight_gb_lines(seven_b, stt)
    if args.json:
        print(json.dumps({**report_json(report), "predicted": speed, "cards": cards,
                          "conversations": None if slots is None else {
                              "fit": slots[0].conversations,
                              "per_conversation_bytes": slots[0].per_conversation_bytes,
                              "kv_bytes": slots[0].kv_bytes, "once_bytes": slots[0].once_bytes,
                              "precision": slots[1]}}))
    else:
        lines = [] if slots is None else [slots[0].sentence(stt is not None)]
        print("\n".join(report.lines() + lines + speed + cards))
    return 0


def _slot_line(report: MemoryReport, speech: ModelShape | None, stt: ModelShape | None
               ) -> tuple[SlotCapacity, str] | None:
    """How many conversations a server's one engine holds on this GPU, at the plan's
    precision (None: no speech model, or not a GPU)."""
    from app.plan.slot_capacity import conversations_that_fit

    device = report.device
    precision = report.precision
    if speech is None or device.kind != "cuda" or precision is None:
        return None
    return (conversations_that_fit(speech, PRECISIONS[precision], device.usable_bytes(), stt),
            precision)


def _shapes(model: str | None, folder: Path | None, stt_model: str | None
            ) -> tuple[ModelShape | None, ModelShape | None]:
    """The speech model's and the recogniser's shapes (counted on meta; cached)."""
    from app.asr.stt_catalog import get_stt_manifest
    from app.checkpoints.catalog import get_manifest
    from app.plan.footprint import checkpoint_shape, stt_shape

    speech = checkpoint_shape(get_manifest(model), folder) if model else None
    stt = stt_shape(get_stt_manifest(stt_model)) if stt_model and stt_model != "none" else None
    return speech, stt
