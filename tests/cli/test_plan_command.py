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
