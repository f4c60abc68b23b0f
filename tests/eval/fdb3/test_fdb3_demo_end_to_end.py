"""`eval fdb3 make-demo` -> `run` -> `score` on this CPU: the demo's 12 spoken samples through
the whole pipeline (the tiny speech model, the tiny recogniser, the orchestrator, the stand-in
Ollama over its real wire protocol, our MCP server of the 12 mock APIs started for each
sample through the app's MCP client), result files in the benchmark's shape, resumable, and
a report whose numbers are the ones worked out by hand from the demo's plans
(app/eval/fdb3/demo_scenarios.py; docs/fdb3.md shows the sums):

- tool selection: 10 scenarios right (1.0), travel hard misses a call (F1 0.8), finance
  hard makes one too many (F1 6/7 = 0.857): (10 + 0.8 + 0.857) / 12 = 0.971;
- arguments (exact): travel easy's ISO date fails its only call (0), three hard scenarios
  get 2 of 3 (0.667), the rest all: (8 + 3 x 0.667) / 12 = 0.833;
- strict pass: 7 of 12 = 0.583 (2 wrong tools, 3 wrong arguments); medium 1.0, hard 0.0.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.eval.fdb3.demo_scenarios import demo_scenarios

REPO_ROOT = Path(__file__).resolve().parents[3]
EXPECTED_KEYS = {"example_id", "actual_tool_calls", "transcript", "asr_chunks",
                 "user_speech_end_rel"}


def eval_cli(args: list[str], data_dir: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "main.py", "eval", *args], cwd=REPO_ROOT,
                          env={**os.environ, "CONTEXTSPAN_DATA_DIR": str(data_dir)},
                          capture_output=True, text=True, timeout=1800)


@pytest.fixture(scope="module")
def stt_built(data_dir):
    from app.asr.stt_catalog import ensure_stt_built, get_stt_manifest

    return ensure_stt_built(get_stt_manifest("tiny-stt"))


def mock_servers_running(under: Path) -> list[str]:
    """Command lines of our mock MCP servers still running for samples under `under`."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if "app.eval.fdb3.mock_server" in cmdline and str(under) in cmdline:
            found.append(cmdline)
    return found


@pytest.mark.slow
def test_make_demo_then_run_then_score(tiny_folder, stt_built, data_dir, tmp_path):
    demo = tmp_path / "fdb_v3_demo"
    made = eval_cli(["fdb3", "make-demo", str(demo)], data_dir)
    assert made.returncode == 0, made.stderr
    folders = sorted(p for p in demo.iterdir() if p.is_dir())
    scenarios = {s["id"]: s for s in demo_scenarios()}
    assert len(folders) == 12
    assert {f.name.rsplit("_", 1)[0] for f in folders} == set(scenarios)
    assert {scenarios[f.name.rsplit("_", 1)[0]]["domain"] for f in folders} == {
        "travel_identity", "finance_billing", "housing_location", "ecommerce_support"}

    args = ["fdb3", "run", str(demo), "--provider", "demo", "--llm", "standin",
            "--asr", "tiny-stt", "--vad"]
    run = eval_cli(args, data_dir)
    assert run.returncode == 0, run.stderr
    assert "[fdb3] ran 12, already done 0, failed 0 of 12" in run.stderr
    assert mock_servers_running(demo) == []  # one per sample, each gone with its sample
    stamps = {}
    for folder in folders:
        result = json.loads((folder / "result_demo.json").read_text())
        assert set(result) >= EXPECTED_KEYS
        assert result["example_id"] == folder.name.rsplit("_", 1)[0]
        assert result["status"] == "completed"
        assert all({"function", "args", "timestamp_start"} <= set(c)
                   for c in result["actual_tool_calls"])
        assert (folder / "output_demo.wav").is_file()
        assert (folder / "contextspan_run_demo.jsonl").is_file()
        stamps[folder] = (folder / "result_demo.json").stat().st_mtime_ns
    book = json.loads(next(demo.glob("demo_ecommerce_02_*/result_demo.json")).read_text())
    found, added = book["actual_tool_calls"]
    first_id = json.loads(found["result"])["products"][0]["product_id"]
    # $RESULT_0 resolved; the quantity the plan left out is the function's default
    assert added["args"] == {"product_id": first_id, "quantity": 1}
    assert added["llm_args"] == {"product_id": first_id}
    # (the tiny recogniser's random words go on until the turn ends: the call comes then)
    assert added["timestamp_start"] >= found["called_at"] >= book["user_speech_end_rel"] > 0
    austin = json.loads(next(demo.glob("demo_housing_01_*/result_demo.json")).read_text())
    assert austin["actual_tool_calls"][0]["args"] == {"city": "Austin", "bedrooms": 2,
                                                      "max_price": 2000.0}

    again = eval_cli(args, data_dir)
    assert again.returncode == 0, again.stderr
    assert "[fdb3] ran 0, already done 12, failed 0 of 12" in again.stderr
    assert {f: (f / "result_demo.json").stat().st_mtime_ns for f in folders} == stamps

    scored = eval_cli(["fdb3", "score", str(demo), "--provider", "demo"], data_dir)
    assert scored.returncode == 0, scored.stderr
    scores = json.loads((demo / "fdb3_scores_demo.json").read_text())["overall"]
    assert scores["by_metric"]["tool_selection"] == 0.971
    assert scores["by_metric"]["arguments_exact"] == 0.833
    assert scores["pass_rate"]["strict"] == 0.583
    assert scores["pass_rate"]["failure_breakdown"] == {"wrong_tools": 2,
                                                        "wrong_arguments": 3}
    assert scores["by_difficulty"]["medium"]["pass_rate"] == 1.0
    assert scores["by_difficulty"]["hard"]["pass_rate"] == 0.0
    assert scores["by_domain"]["travel_identity"]["pass_rate"] == 0.333
    assert scores["latency"]["tool_call_s"]["n"] == 12
    report = (demo / "fdb3_scores_demo.md").read_text()
    assert "| pass rate (strict) | 0.583 | 0.470 |" in report
    assert "| tool selection (F1) | 0.971 | 0.855 |" in report
    assert report in scored.stdout
