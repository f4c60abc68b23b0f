"""`python main.py eval make-set` and `eval qa` end to end on the tiny checkpoints, with the
Ollama stand-in as both the LLM that answers and the judge:

- a span-only set (meta.json layout) on tiny-cs with its <ret> trigger (forced: random
  weights never ask): the LLM finds each fact with local search, the spans carry them (ref
  100 %), the gold arm injects the passages, and the no-inject arm scores zero;
- an OpenAudioBench set on the end-of-turn tiny model, with a missing audio file, a bad csv
  row and an undecodable audio file reported and skipped; --resume then skips every done
  item.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.llm.ollama_standin import OllamaStandIn, ScriptedReply
from tests.eval.qa_standin import scripted
from tests.speech import spoken

REPO_ROOT = Path(__file__).resolve().parents[2]
TAIL = "3"  # seconds of silence after each question (14 in the paper's runs)


def eval_cli(args: list[str], data_dir: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "main.py", "eval", *args], cwd=REPO_ROOT,
                          env={**os.environ, "CONTEXTSPAN_DATA_DIR": str(data_dir)},
                          capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def stt_built(data_dir):
    from app.asr.stt_catalog import ensure_stt_built, get_stt_manifest

    return ensure_stt_built(get_stt_manifest("tiny-stt"))


def results(out: Path) -> dict[tuple[str, str], dict]:
    payload = json.loads((out / "results.json").read_text())
    return {(r["set"], r["arm"]): r for r in payload["results"]}


def test_span_only_set_answers_only_from_the_span(tiny_cs_folder, stt_built, data_dir,
                                                  tmp_path):
    made = eval_cli(["make-set", "--out", str(tmp_path / "facts_set"), "--count", "5",
                     "--seed", "7"], data_dir)
    assert made.returncode == 0, made.stderr
    facts = {f["id"]: f for f in json.loads((tmp_path / "facts_set" / "meta.json").read_text())}
    out = tmp_path / "out"
    running_in = out / "span_facts" / "inject"

    def router(body: dict) -> ScriptedReply:
        """Search for the running item's invented name (its folder has no item.json yet;
        the ASR of the tiny recogniser hears nothing useful)."""
        running = [p.name for p in running_in.iterdir()
                   if p.is_dir() and not (p / "item.json").exists()]
        topic = facts[running[0]]["text"].rstrip("?").split(" the ")[-1]
        return ScriptedReply(tool_calls=[{"name": "local_search",
                                          "arguments": {"query": topic}}])

    common = ["qa", "--data", str(tmp_path / "facts_set"), "--out", str(out), "--model",
              "tiny-cs", "--asr", "tiny-stt", "--vad", "--tail", TAIL, "--force-ret-after",
              "0.5", "--judge", "ollama", "--judge-model", "standin:latest"]
    with OllamaStandIn(models=("standin:latest",), script=scripted(router)) as standin:
        host = ["--llm", "ollama", "--llm-host", standin.url, "--llm-model", "standin:latest",
                "--tools", "none", "--judge-host", standin.url]
        injected = eval_cli([*common, *host], data_dir)
        assert injected.returncode == 0, injected.stderr
        asked = len(standin.requests)
        withheld = eval_cli([*common, *host, "--no-inject"], data_dir)
        assert withheld.returncode == 0, withheld.stderr
        gold = eval_cli([*common, *host, "--gold"], data_dir)
        assert gold.returncode == 0, gold.stderr
        routed = [b for b in standin.requests[:asked] if b.get("tools")]
        later = [b for b in standin.requests[asked:] if b.get("tools")]
    # One <ret> forced per item (the random model may add its own); the no-inject and gold
    # arms never ask the LLM (only the judge).
    assert len(routed) >= 5 and not later
    assert {t["function"]["name"] for t in routed[0]["tools"]} == {"local_search"}

    by_arm = results(out)
    inject = by_arm[("span_facts", "inject")]["summary"]
    assert inject["n"] == 5 and inject["ret_rate"] == 1.0 and inject["span_rate"] == 1.0
    assert inject["ref"] == 1.0 and inject["n_ref_judged"] == 5  # every span holds its fact
    assert inject["inj_lat_s"] is not None and inject["ret_lat_s"] is not None
    none = by_arm[("span_facts", "no-inject")]["summary"]
    assert none["n"] == 5 and none["span_rate"] == 0.0 and none["ref"] is None
    assert none["ret_rate"] == 1.0  # the <ret> happened; its answer was withheld
    assert (none["resp"] or 0.0) == 0.0  # the random model cannot know a fresh fact
    # The gold arm injects each item's passage, as it is, without asking the LLM.
    gold_arm = by_arm[("span_facts", "gold")]
    assert gold_arm["summary"]["ref"] == 1.0 and gold_arm["summary"]["span_rate"] == 1.0
    landed = json.loads((out / "span_facts" / "gold" / "fact_0003" / "events.json").read_text())
    assert landed["events"][0]["inject"] == facts["fact_0003"]["knowledge"]
    item = out / "span_facts" / "inject" / "fact_0000"
    events = json.loads((item / "events.json").read_text())
    assert events["events"][0]["inject"].startswith("(tool result) ")
    assert facts["fact_0000"]["answer"] in events["events"][0]["inject"]
    assert (item / "output.wav").stat().st_size > 0 and (item / "text.txt").is_file()
    table = (out / "results.md").read_text()
    assert "| span_facts | inject | 5 | 100.0 |" in table
    assert "| span_facts | no-inject | 5 | – |" in table
    assert "| span_facts | gold | 5 | 100.0 |" in table
    assert "ETA" in injected.stderr  # the progress bar
    from PySide6.QtGui import QImage

    chart = QImage(str(out / "results.png"))
    assert (chart.width(), chart.height()) == (1200, 520)


def write_openaudiobench(root: Path) -> Path:
    """web_questions with 5 good rows, a row whose audio is missing, a row with a field too
    many (the csv module cannot pair it with the header) and one whose audio is not audio
    (found only when the item runs)."""
    folder = root / "web_questions"
    (folder / "audios").mkdir(parents=True)
    questions = [("What is the capital of France?", "Paris", "paris city"),
                 ("Who wrote Hamlet?", "Shakespeare", "William Shakespeare"),
                 ("What is the largest ocean?", "Pacific", ""),
                 ("How many legs does a spider have?", "eight", "8"),
                 ("What color is the sky?", "blue", "")]
    scratch = root / "scratch"
    scratch.mkdir()
    with (folder / "web_questions.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["question", "answer", "aliases", "audio_filename"])
        for index, (question, answer, aliases) in enumerate(questions):
            wav = spoken(question, scratch, before_s=0.2, after_s=0.2)
            wav.rename(folder / "audios" / f"q{index}.wav")
            writer.writerow([question, answer, aliases, f"audios/q{index}.wav"])
        writer.writerow(["Where is the audio?", "nowhere", "", "missing.wav"])
        writer.writerow(["A broken row", "x", "", "q0.wav", "one field too many"])
        writer.writerow(["Is this audio?", "no", "", "garbage.wav"])
    (folder / "audios" / "garbage.wav").write_bytes(b"RIFF, but not really a WAV file")
    return root


def test_openaudiobench_on_the_end_of_turn_model_and_resume(tiny_folder, stt_built, data_dir,
                                                            tmp_path):
    root = write_openaudiobench(tmp_path / "oab")
    out = tmp_path / "out"
    with OllamaStandIn(models=("standin:latest",), script=scripted(
            lambda body: ScriptedReply(content="The answer is Paris."))) as standin:
        args = ["qa", "--data", str(root), "--out", str(out), "--model", "tiny", "--asr",
                "tiny-stt", "--vad", "--tail", TAIL, "--llm", "ollama", "--llm-host",
                standin.url, "--llm-model", "standin:latest", "--tools", "none", "--judge",
                "ollama", "--judge-host", standin.url, "--judge-model", "standin:latest"]
        first = eval_cli(args, data_dir)
        assert first.returncode == 0, first.stderr
        done = {p.parent.name: p.stat().st_mtime_ns
                for p in (out / "web_questions" / "inject").glob("*/item.json")}
        again = eval_cli([*args, "--resume"], data_dir)
        assert again.returncode == 0, again.stderr
    assert "web_questions_5: audio not found" in first.stderr
    assert "web_questions_6: unreadable csv row" in first.stderr
    assert "skipped web_questions_7: cannot read audio" in first.stderr
    assert sorted(done) == [f"web_questions_{i}" for i in range(5)]
    assert "ran 0, resumed 5" in again.stderr
    assert {p.parent.name: p.stat().st_mtime_ns for p in
            (out / "web_questions" / "inject").glob("*/item.json")} == done

    result = results(out)[("web_questions", "inject")]
    summary = result["summary"]
    assert summary["n"] == 5
    assert len(result["problems"]) == 3
    item = json.loads((out / "web_questions" / "inject" / "web_questions_0" / "item.json")
                      .read_text())
    assert item["trigger"] == "end_of_turn" and item["answer"] == "Paris | aliases: paris city"
    # The question's end to 0.01 s, as the reference writes it (its ret_lat_s is from it).
    from app.audio_file import read_mono_24k

    assert item["question_end_s"] == round(len(read_mono_24k(item["audio"])) / 24000, 2)
    # Every span said "Paris": the judge finds it for the first question only.
    rows = {r["id"]: r for r in result["rows"]}
    spanned = [i for i, r in rows.items() if r["n_span"]]
    assert spanned, "the end of turn started no turn that landed a span"
    assert all(rows[i]["ref"] == (1 if i == "web_questions_0" else 0) for i in spanned)
    assert "paper Gemma 4" in (out / "results.md").read_text()
