"""Gather what the memory plan needs and plan: the checkpoint's shape, the recogniser's, the
user's LLM as its backend's footprint hook reports it (its row in app/llm_backends.py:
Ollama's asks Ollama), and the device's memory.

`survey_for_settings(settings)` is what the first-run dialog and Settings call (off the GUI
thread: it asks Ollama over HTTP and may start CUDA); `python main.py plan` calls
`survey_memory` with its flags. The arithmetic is app/plan/memory_plan.py.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from app.llm_backends import OLLAMA, llm_backend_kind
from app.plan.memory_plan import (
    DeviceMemory,
    LlmLoad,
    MemoryReport,
    ModelShape,
    Recommendation,
    plan_memory,
)
from app.settings.schema import AppSettings

DEFAULT_STT = "kyutai-stt-1b-en_fr"
NO_STT = "none"


def survey_memory(
    model_id: str | None,
    *,
    folder: Path | None = None,
    device: str | None = None,
    device_memory: DeviceMemory | None = None,
    precision: str | None = None,
    stt_model: str | None = DEFAULT_STT,
    llm_backend: str = OLLAMA,
    llm_host: str | None = None,
    llm_model: str | None = None,
    timeout_s: float = 3.0,
) -> MemoryReport:
    """Plan for the speech model `model_id` (None: it runs on a server), the STT `stt_model`
    (None or "none": no recogniser) and the LLM. `device_memory` overrides the probe."""
    from app.asr.stt_catalog import get_stt_manifest
    from app.checkpoints.catalog import get_manifest
    from app.plan.device_memory import probe_device_memory
    from app.plan.footprint import checkpoint_shape, stt_shape

    memory = device_memory or probe_device_memory(device)
    speech = checkpoint_shape(get_manifest(model_id), folder) if model_id else None
    stt = None
    if stt_model and stt_model != NO_STT:
        stt = stt_shape(get_stt_manifest(stt_model))
    notes: list[str] = []
    llm = None
    backend = llm_backend_kind(llm_backend)
    if backend is not None:  # what its model weighs here, in its row's hook's words
        footprint = backend.footprint_function()(llm_host, llm_model, memory.kind, timeout_s)
        if footprint.not_counted is not None:
            notes.append(footprint.not_counted)
        else:
            llm = LlmLoad(footprint.model, footprint.bytes, measured=footprint.measured,
                          held_now=footprint.held_now, server=backend.prose)
    # What runs there is the device's own answer (device.survey_devices), the one Settings
    # offers and loading finds: int8 on a CPU that runs it is planned, not refused.
    if speech is not None and precision is not None and precision not in memory.offered():
        notes.append(f"{precision} does not run on {memory.name} (it runs "
                     f"{', '.join(memory.offered())}).")
    report = plan_memory(memory, speech, stt, llm, precision=precision, notes=notes)
    return replace(report, recommendation=real_time_recommendation(memory, speech, stt, llm))


SEVEN_B_LINEAR_PARAMS = 5_000_000_000  # the speed predictions are counted on the 7B


def real_time_recommendation(memory: DeviceMemory, speech: ModelShape | None,
                             stt: ModelShape | None = None, llm: LlmLoad | None = None
                             ) -> Recommendation | None:
    """The precision that keeps the 7B in real time on this card, among those whose whole
    plan fits (app/plan/speed_plan.py: predicted); None for a card it does not know, or a
    model that is not the 7B."""
    from app.plan.speed_plan import find_card, recommend

    card = find_card(memory.name)
    if card is None or speech is None or speech.linear_params < SEVEN_B_LINEAR_PARAMS:
        return None
    runs = [p for p in card.precisions if p in memory.offered()] or list(card.precisions)
    fits = [p for p in runs if plan_memory(memory, speech, stt, llm, precision=p).fits]
    if fits:
        return recommend(card, fits)
    alone = [p for p in runs if plan_memory(memory, speech, precision=p).fits]
    if not alone:
        return Recommendation(None, f"the 7B fits {card.name} at no precision it runs")
    found = recommend(card, alone)
    return Recommendation(found.precision, f"{found.why}; only with speech recognition and "
                          "the LLM off this card")


def survey_for_settings(settings: AppSettings, device_memory: DeviceMemory | None = None,
                        timeout_s: float = 3.0) -> MemoryReport:
    """The plan for the app's settings: what the first-run dialog and Settings show
    (`report.lines()`); with precision "auto", `report.precision` is the one that loads.
    `timeout_s`: for each question to Ollama (a hung Ollama is a note, not a wait)."""
    speech = settings.speech
    local = settings.engine.mode == "local"
    # The recogniser weighs on this machine unless the server recognises the user's words.
    recognised_here = settings.llm.backend != "none" and (
        local or not settings.engine.asr_on_server)
    folder = Path(speech.custom_folder).expanduser() if speech.custom_folder else None
    return survey_memory(
        speech.model_id if local else None,
        folder=folder,
        device=None if speech.device == "auto" else speech.device,
        device_memory=device_memory,
        precision=None if speech.precision == "auto" else speech.precision,
        stt_model=settings.llm.stt_model if recognised_here else None,
        llm_backend=settings.llm.backend,
        llm_host=settings.llm.host,
        llm_model=settings.llm.model,
        timeout_s=timeout_s,
    )
