"""The memory plan on made-up machines: Context Spanning 7B (counted from its architecture),
the Kyutai STT and a qwen3:4b that a real stand-in Ollama reports over HTTP."""

from __future__ import annotations

import socket

import pytest

from app.llm.ollama_footprint import is_local_host
from app.llm.ollama_standin import OllamaStandIn, StandInModel
from app.plan.memory_plan import (
    GIB,
    DeviceMemory,
    LlmLoad,
    ModelShape,
    plan_memory,
)
from app.plan.memory_survey import survey_memory

QWEN3_4B_INFO = {  # the GGUF metadata Ollama's /api/show gives for qwen3:4b
    "general.architecture": "qwen3",
    "general.parameter_count": 4_022_468_096,
    "qwen3.block_count": 36,
    "qwen3.context_length": 40960,
    "qwen3.embedding_length": 2560,
    "qwen3.attention.head_count": 32,
    "qwen3.attention.head_count_kv": 8,
    "qwen3.attention.key_length": 128,
    "qwen3.attention.value_length": 128,
}
QWEN3_FILE_BYTES = 2_497_280_256
QWEN3_LOADED_BYTES = 3_400_000_000  # what /api/ps reports once Ollama has loaded it
QWEN3_KV_BYTES = 36 * 8 * (128 + 128) * 4096 * 2  # f16 KV cache at Ollama's num_ctx 4096


def qwen3(loaded: bool = True, vram: int | None = None) -> StandInModel:
    return StandInModel(file_bytes=QWEN3_FILE_BYTES, family="qwen3", parameter_size="4.0B",
                        quantization_level="Q4_K_M", model_info=QWEN3_4B_INFO,
                        loaded_bytes=QWEN3_LOADED_BYTES if loaded else None,
                        loaded_vram_bytes=vram)


def made_up(kind: str, gigabytes: int, free: int | None = None) -> DeviceMemory:
    total = gigabytes * GIB
    return DeviceMemory(kind, f"made-up {kind} {gigabytes} GB", total,
                        total if free is None else free)


@pytest.fixture(scope="module")
def ollama():
    with OllamaStandIn(models=("qwen3:4b",), model_facts={"qwen3:4b": qwen3()}) as server:
        yield server


def plan_for(device: DeviceMemory, host: str, precision: str | None = None):
    return survey_memory("context-spanning-7b", device_memory=device, precision=precision,
                         stt_model="kyutai-stt-1b-en_fr", llm_host=host, llm_model="qwen3:4b")


def part(plan, label_start: str):
    return next(p for p in plan.parts if p.label.startswith(label_start))


def test_a_16_gb_card_runs_context_spanning_in_8_bit_beside_the_stt_and_ollama(ollama):
    report = plan_for(made_up("cuda", 16), ollama.url)
    assert report.fits and report.precision == "int8"
    assert [p.label for p in report.plan.parts] == [
        "Context Spanning 7B in 8-bit,", "speech recognition", "qwen3:4b in Ollama"]
    # The Ollama model weighs what the stand-in reported for it, measured (not "about").
    ollama_part = part(report.plan, "qwen3:4b")
    assert ollama_part.bytes == QWEN3_LOADED_BYTES and not ollama_part.estimated
    assert report.plan.sentence().startswith("Context Spanning 7B in 8-bit, ")
    assert report.plan.sentence().endswith(" of 16 GB")
    assert report.suggestions == ()
    # bf16 is the better precision, but the 7B alone is larger than 16 GB in bf16.
    assert not plan_for(made_up("cuda", 16), ollama.url, precision="bf16").fits


def test_the_best_precision_that_fits_is_the_default(ollama):
    assert plan_for(made_up("cuda", 24), ollama.url).precision == "bf16"
    assert plan_for(made_up("mac", 32), ollama.url).precision == "q8"
    assert plan_for(made_up("mac", 64), ollama.url).precision == "bf16"


def test_a_12_gb_card_does_not_fit_and_the_plan_says_what_would(ollama):
    report = plan_for(made_up("cuda", 12), ollama.url)
    assert not report.fits
    assert report.precision == "int8"  # the smallest the torch engine offers was tried
    assert report.plan.total_bytes > 12 * GIB
    changes = [s.change for s in report.suggestions]
    assert len(changes) == 2
    # The 7B in 8-bit alone fits a 12 GB card: with the LLM elsewhere and no recognition.
    alone = report.suggestions[0]
    assert alone.change.startswith("run qwen3:4b on another machine and turn speech "
                                   "recognition off")
    assert alone.plan.fits and alone.plan.precision == "int8"
    assert [p.label for p in alone.plan.parts] == ["Context Spanning 7B in 8-bit,"]
    assert changes[1].startswith("run the speech engine on a server")
    served = report.suggestions[1].plan
    assert served.fits and served.precision is None
    assert [p.label for p in served.parts] == ["speech recognition", "qwen3:4b in Ollama"]
    text = "\n".join(report.lines())
    assert text.splitlines()[1].startswith("Does not fit: ")
    assert "It fits with one of these changes:" in text


def test_a_16_gb_mac_fits_in_4_bit_once_the_llm_is_on_another_machine(ollama):
    report = plan_for(made_up("mac", 16), ollama.url)
    assert report.device.ceiling_bytes() < 16 * GIB  # macOS keeps a share of unified memory
    assert not report.fits and report.precision == "q4"
    elsewhere = next(s for s in report.suggestions if "on another machine" in s.change)
    assert elsewhere.change.startswith("run qwen3:4b on another machine")
    assert elsewhere.plan.fits and elsewhere.plan.precision == "q4"
    assert all("qwen3" not in p.label for p in elsewhere.plan.parts)
    assert any(s.change.startswith("run the speech engine on a server")
               for s in report.suggestions)


def test_an_ollama_model_already_loaded_is_not_counted_twice(ollama):
    """CUDA's free figure already lacks what Ollama holds; the plan counts it back once."""
    crowded = made_up("cuda", 16, free=16 * GIB - QWEN3_LOADED_BYTES)
    report = plan_for(crowded, ollama.url)
    assert report.fits and report.plan.usable_bytes == 16 * GIB


def test_only_the_gpu_part_of_an_ollama_model_counts_on_a_cuda_card():
    half = QWEN3_LOADED_BYTES // 2
    with OllamaStandIn(models=("qwen3:4b",),
                       model_facts={"qwen3:4b": qwen3(vram=half)}) as server:
        cuda = plan_for(made_up("cuda", 16), server.url)
        mac = plan_for(made_up("mac", 32), server.url)
    assert part(cuda.plan, "qwen3:4b").bytes == half
    assert part(mac.plan, "qwen3:4b").bytes == QWEN3_LOADED_BYTES  # unified: all of it


def test_a_model_not_loaded_yet_is_estimated_from_its_file_and_kv_cache():
    with OllamaStandIn(models=("qwen3:4b",),
                       model_facts={"qwen3:4b": qwen3(loaded=False)}) as server:
        report = plan_for(made_up("cuda", 16), server.url)
    estimate = part(report.plan, "qwen3:4b")
    assert estimate.estimated and estimate.bytes == QWEN3_FILE_BYTES + QWEN3_KV_BYTES
    assert "qwen3:4b in Ollama about " in report.plan.sentence()


def test_an_unreachable_ollama_is_left_out_and_the_plan_says_so():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # nothing listens there once it is closed
    report = plan_for(made_up("cuda", 16), f"http://127.0.0.1:{port}")
    assert all("qwen3" not in p.label for p in report.plan.parts)
    assert any("qwen3:4b is not counted" in n and "not reachable" in n for n in report.notes)


def test_only_an_ollama_on_this_machine_shares_its_memory():
    assert is_local_host("http://127.0.0.1:11434") and is_local_host("localhost:11434")
    assert is_local_host(socket.gethostname())
    assert not is_local_host("http://gpu-box.example.org:11434")


# ---- the arithmetic alone ----------------------------------------------------------------

SEVEN_B = ModelShape("A 7B", linear_params=7 * 10**9, other_params=3 * 10**8,
                     codec_params=8 * 10**7, cache_values=8 * 10**8, codec_cache_values=0,
                     workspace_bytes=0)


def test_a_precision_asked_for_that_does_not_fit_gets_a_smaller_one_suggested():
    report = plan_memory(made_up("mac", 16), SEVEN_B, precision="bf16")
    assert not report.fits and report.precision == "bf16"
    smaller = report.suggestions[0]
    assert smaller.change.startswith("load the speech model in 8-bit")
    assert smaller.plan.fits and smaller.plan.precision == "q8"


def test_when_nothing_fits_at_all_the_plan_says_so():
    llm = LlmLoad("big:70b", 40 * GIB, measured=True, held_now=False)
    report = plan_memory(made_up("cuda", 8), SEVEN_B, SEVEN_B, llm)
    assert not report.fits and report.suggestions == ()
    assert "Nothing of this fits on this device" in "\n".join(report.lines())


def test_with_the_server_recognising_the_thin_clients_plan_counts_no_recogniser(ollama):
    """Speech model on a server: the laptop's plan holds the recogniser only while this
    machine recognises the user's words, never once the server does."""
    from app.plan.memory_survey import survey_for_settings
    from app.settings.schema import AppSettings, EngineSettings, LlmSettings

    def labels(asr_on_server: bool) -> list[str]:
        settings = AppSettings(
            engine=EngineSettings(mode="server", asr_on_server=asr_on_server),
            llm=LlmSettings(backend="ollama", host=ollama.url, model="qwen3:4b",
                            stt_model="kyutai-stt-1b-en_fr"))
        report = survey_for_settings(settings, made_up("cuda", 16), timeout_s=5.0)
        return [p.label for p in report.plan.parts]

    assert "speech recognition" in labels(asr_on_server=False)
    assert "speech recognition" not in labels(asr_on_server=True)
