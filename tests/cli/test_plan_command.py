"""`python main.py plan` in a child process, for made-up machines (`--for`), with a real
stand-in Ollama reporting qwen3:4b's size over HTTP."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.llm.ollama_standin import OllamaStandIn, StandInModel

REPO_ROOT = Path(__file__).resolve().parents[2]
QWEN3_4B = StandInModel(file_bytes=2_497_280_256, family="qwen3", parameter_size="4.0B",
                        quantization_level="Q4_K_M", loaded_bytes=3_400_000_000)


@pytest.fixture(scope="module")
def ollama():
    with OllamaStandIn(models=("qwen3:4b",), model_facts={"qwen3:4b": QWEN3_4B}) as server:
        yield server


def plan(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, CONTEXTSPAN_DATA_DIR=str(tmp_path / "data"),
               CONTEXTSPAN_CONFIG_DIR=str(tmp_path / "config"))
    return subprocess.run([sys.executable, "main.py", "plan", *args], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


def plan_7b(tmp_path: Path, ollama: OllamaStandIn, machine: str) -> list[str]:
    result = plan(tmp_path, "--model", "context-spanning-7b", "--stt", "kyutai-stt-1b-en_fr",
                  "--llm", "ollama", "--llm-host", ollama.url, "--llm-model", "qwen3:4b",
                  "--for", machine)
    assert result.returncode == 0, result.stderr
    print(result.stdout)  # the plans, for the record (pytest -s)
    return result.stdout.splitlines()


def test_plans_for_a_16_gb_card_a_12_gb_card_and_a_16_gb_mac(tmp_path, ollama):
    card16 = plan_7b(tmp_path, ollama, "cuda:16")
    assert card16[1].startswith("Fits: Context Spanning 7B in 8-bit, ")
    assert "+ qwen3:4b in Ollama 3.2 GB = " in card16[1] and card16[1].endswith(" of 16 GB")

    card12 = plan_7b(tmp_path, ollama, "cuda:12")
    assert card12[1].startswith("Does not fit: Context Spanning 7B in 8-bit, ")
    assert card12[2] == "It fits with one of these changes:"
    assert card12[3].startswith("- run qwen3:4b on another machine and turn speech "
                                "recognition off")
    assert card12[3].endswith("Context Spanning 7B in 8-bit, 10.4 GB = 10.4 of 12 GB")
    assert card12[4].startswith("- run the speech engine on a server")
    assert card12[4].endswith("speech recognition 2.3 GB + qwen3:4b in Ollama 3.2 GB = 5.5 of "
                              "12 GB")

    mac16 = plan_7b(tmp_path, ollama, "mac:16")
    assert "10.7 GB of it for the GPU" in mac16[0]
    assert mac16[1].startswith("Does not fit: Context Spanning 7B in 4-bit, ")
    assert mac16[3].startswith("- run qwen3:4b on another machine (Settings → Assistant (LLM) "
                               "→ Server): Context Spanning 7B in 4-bit, ")
    assert "qwen3" not in mac16[3].split(": ", 1)[1]


def test_a_bad_machine_is_one_line_on_stderr(tmp_path):
    result = plan(tmp_path, "--for", "gpu:12")
    assert result.returncode == 1
    assert result.stderr.startswith("error: --for takes KIND:GB") and result.stdout == ""


def test_for_a_card_it_knows_the_plan_says_which_precision_keeps_up(tmp_path, ollama):
    result = plan(tmp_path, "--model", "context-spanning-7b", "--stt", "kyutai-stt-1b-en_fr",
                  "--llm", "ollama", "--llm-host", ollama.url, "--llm-model", "qwen3:4b",
                  "--card", "RTX 4060 Ti")
    assert result.returncode == 0, result.stderr
    print(result.stdout)
    lines = result.stdout.splitlines()
    assert lines[0].startswith("RTX 4060 Ti 16 GB: 16 GB of GPU memory")
    assert lines[1].startswith("Fits: Context Spanning 7B in 8-bit, ")  # what auto loads
    said = next(line for line in lines if line.startswith("Real time: "))
    assert said.startswith("Real time: int4 keeps the 7B in real time on RTX 4060 Ti 16 GB")
    assert "(predicted)" in said and "H200" in said
    predicted = lines[lines.index(next(line for line in lines
                                       if line.startswith("Predicted on "))) + 1:]
    assert [line.split(":")[0] for line in predicted] == ["- bf16", "- fp8", "- int8", "- int4"]
    assert "does not fit" in predicted[0] and "keeps up" in predicted[3]


def test_the_cards_table_predicts_every_common_card_with_its_basis(tmp_path):
    result = plan(tmp_path, "--model", "context-spanning-7b", "--stt", "kyutai-stt-1b-en_fr",
                  "--llm", "none", "--for", "cuda:8", "--cards")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    for card in ("RTX 3060 12 GB", "RTX 4060 Ti 16 GB", "RTX 4070 12 GB", "RTX 4080 16 GB",
                 "RTX 4090 24 GB", "A10 24 GB", "L4 24 GB", "Apple M3 Pro 18 GB (MLX)"):
        assert f"\n{card}: " in out, card
    assert "Predicted, not measured on these cards." in out
    assert "8 GB cards, the 7B at int4" in out and "recogniser on the CPU" in out
    unknown = plan(tmp_path, "--card", "Voodoo 5")
    assert unknown.returncode == 1 and "not in the speed table" in unknown.stderr


def test_the_plan_says_how_many_conversations_one_engine_holds(tmp_path):
    """Issue 33: `plan` for a GPU says how many conversations `serve --slots N` holds there,
    each its KV ring, Mimi's state and the measured allowance, beside the engine's once."""
    import json

    from app.plan.slot_capacity import REST_PER_CONVERSATION_BYTES

    fits = {}
    for gb in ("80", "139"):
        result = plan(tmp_path, "--model", "context-spanning-7b", "--stt", "none", "--llm",
                      "none", "--for", f"cuda:{gb}", "--json")
        assert result.returncode == 0, result.stderr
        slots = json.loads(result.stdout)["conversations"]
        assert slots["precision"] == "bf16"
        per, once, kv = slots["per_conversation_bytes"], slots["once_bytes"], slots["kv_bytes"]
        assert kv > 1.7 * 2**30 and per - kv > REST_PER_CONVERSATION_BYTES
        usable = int(gb) * 2**30  # an assumed card: all of it free
        assert slots["fit"] == (usable - once) // per
        fits[gb] = slots["fit"]
        lines = plan(tmp_path, "--model", "context-spanning-7b", "--stt", "none", "--llm",
                     "none", "--for", f"cuda:{gb}").stdout
        assert f"serve --slots N), by memory: {slots['fit']} (" in lines
    assert 30 <= fits["80"] < fits["139"]
