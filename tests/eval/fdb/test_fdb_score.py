"""`eval fdb` scoring: our STT and VAD on the rendered replies, the results beside the paper's,
the folders left usable by the benchmark's own scripts, and the optional relevance judge."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest
import sphn

from app.eval.fdb.cli import add_fdb_parser, run_fdb
from app.eval.fdb.metrics import Segment, Word
from app.eval.fdb.score import Listeners, ScoreOptions, score_all


def test_rendered_replies_are_scored_with_our_stt_and_written_beside_the_papers(
        rendered, tiny_stt_ready, capsys):
    """`eval fdb --score-only` on the rendered folder, through the command's own parser."""
    parser = argparse.ArgumentParser()
    add_fdb_parser(parser.add_subparsers(dest="eval"))
    args = parser.parse_args(["fdb", "--out", str(rendered.out), "--score-only",
                              "--stt", "tiny-stt", "--device", "cpu"])
    assert run_fdb(args) == 0
    printed = capsys.readouterr().out
    assert "Full-Duplex-Bench v1" in printed and "parakeet-tdt-0.6b-v2" in printed
    results = json.loads((rendered.out / "fdb_scores.json").read_text())
    tasks = {t["task"]: t for t in results["tasks"]}
    assert tasks["candor_turn_taking"]["kind"] == "smooth_turn_taking"
    assert tasks["candor_turn_taking"]["scored"] == 1
    assert set(tasks["candor_turn_taking"]["metrics"]) == {"tor", "latency_s"}
    assert tasks["v1_5/user_interruption"] == {
        "task": "v1_5/user_interruption", "kind": "v1.5", "scored": 0, "rendered": 1,
        "metrics": {}}
    assert results["asr"] == "tiny-stt" and "parakeet-tdt-0.6b-v2" in results["asr_notice"]
    sample = results["samples"][0]
    assert sample["sample"] == "candor_turn_taking/1" and sample["user_end_s"] == 1.0

    # Our words sit beside the scored reply in the benchmark's transcript format, under a
    # name its scripts never read (they pick up files ending in output.json).
    asr = json.loads((rendered.out / "candor_turn_taking/1/contextspan_asr.json").read_text())
    assert asr["asr"] == "tiny-stt" and isinstance(asr["chunks"], list)
    assert len(asr["chunks"]) == sample["words"]
    for chunk in asr["chunks"]:
        assert set(chunk) == {"text", "timestamp"} and len(chunk["timestamp"]) == 2
    assert not list(rendered.out.rglob("*output.json"))

    table = (rendered.out / "fdb_scores.md").read_text()
    assert "parakeet-tdt-0.6b-v2" in table and "tiny-stt" in table
    assert "| candor_turn_taking | 1 of 1 | TOR |" in table and "| 0.899 | higher |" in table
    assert "prompts" in table and "unused" in table


class CannedListeners:
    """Fixed words and segments instead of the STT and VAD, recording what they heard."""

    def __init__(self, words: list[Word], segments: list[Segment]) -> None:
        self.heard: list[tuple[int, float]] = []
        self.segment_rates: list[int] = []  # the rate each segments call heard its samples at
        self._words, self._segments = words, segments

    def listeners(self) -> Listeners:
        def words(pcm: np.ndarray, offset: float) -> list[Word]:
            self.heard.append((len(pcm), offset))
            return [w for w in self._words if w.end_s > offset]

        def segments(pcm: np.ndarray, heard_rate: int) -> list[Segment]:
            self.segment_rates.append(heard_rate)
            return list(self._segments)

        return Listeners(words, segments, "canned")


def sample_folder(root: Path, rel: str, seconds: float, **annotations: object) -> Path:
    folder = root / rel
    folder.mkdir(parents=True)
    sphn.write_wav(str(folder / "output.wav"), np.zeros(int(seconds * 16000), np.float32), 16000)
    for name, value in annotations.items():
        (folder / f"{name}.json").write_text(json.dumps(value))
    return folder


def test_a_sample_with_a_broken_annotation_is_reported_and_skipped(tmp_path):
    event = [{"text": "[TURN-TAKING]", "timestamp": [2.0, 2.4]}]
    sample_folder(tmp_path, "candor_turn_taking/1", 4.0, turn_taking=event)
    sample_folder(tmp_path, "candor_turn_taking/2", 4.0, turn_taking=event)
    broken = sample_folder(tmp_path, "candor_turn_taking/3", 4.0, turn_taking=event)
    (broken / "turn_taking.json").write_text("[{\"timestamp\": ")  # cut short
    canned = CannedListeners([Word("yes", 2.5, 3.0), Word("I", 3.0, 3.6)], [])
    lines: list[str] = []
    results = score_all(tmp_path, ScoreOptions(), listeners=canned.listeners(),
                        report=lines.append)
    task = results["tasks"][0]
    assert task["kind"] == "smooth_turn_taking" and task["scored"] == 2 and task["rendered"] == 3
    assert task["metrics"] == {"tor": 1.0, "latency_s": pytest.approx(0.5)}
    assert [s["sample"] for s in results["skipped"]] == ["candor_turn_taking/3"]
    assert any("SKIPPED" in line and "turn_taking.json" in line for line in lines)
    assert "candor_turn_taking/3: turn_taking.json cannot be read" in (
        tmp_path / "fdb_scores.md").read_text()


def test_backchannel_samples_use_vad_segments_and_the_human_timing(tmp_path):
    sample_folder(tmp_path, "icc_backchannel/4", 10.0)
    reference = tmp_path / "icc_gt_distribution.json"
    reference.write_text(json.dumps({"4": [0.5, 0.5]}))
    canned = CannedListeners([Word("mhm", 1.0, 1.3)], [Segment(0.9, 1.4), Segment(6.0, 6.3)])
    results = score_all(tmp_path, ScoreOptions(backchannel_reference=reference),
                        listeners=canned.listeners(), report=lambda line: None)
    metrics = results["tasks"][0]["metrics"]
    assert results["tasks"][0]["kind"] == "backchannel"
    assert metrics["tor"] == 0.0 and metrics["frequency"] == pytest.approx(0.2)
    assert 0.0 < metrics["jsd"] < 1.0
    assert "| icc_backchannel | 1 of 1 | JSD |" in (tmp_path / "fdb_scores.md").read_text()
    reference.write_text("[0.5, 0.5]")  # not the benchmark's file: one clear error
    with pytest.raises(ValueError, match="backchannel-reference"):
        score_all(tmp_path, ScoreOptions(backchannel_reference=reference),
                  listeners=canned.listeners(), report=lambda line: None)


def test_backchannel_segments_are_heard_at_16_khz_unless_the_official_rates_are_asked(
        tmp_path):
    """The benchmark's script gives Silero output.wav's samples at the file's own rate, told
    16 kHz: a 24 kHz file (the reference's) is heard stretched. Ours hears 16 kHz unless
    --fdb-official-rates, and the results say which."""
    sample_folder(tmp_path, "icc_backchannel/4", 4.0)  # a 16 kHz file
    folder = tmp_path / "icc_backchannel/5"
    folder.mkdir(parents=True)
    sphn.write_wav(str(folder / "output.wav"), np.zeros(4 * 24000, np.float32), 24000)
    canned = CannedListeners([], [Segment(0.9, 1.4)])
    results = score_all(tmp_path, ScoreOptions(), listeners=canned.listeners(),
                        report=lambda line: None)
    assert canned.segment_rates == [16000, 16000] and results["official_rates"] is False
    table = (tmp_path / "fdb_scores.md").read_text()
    assert "Backchannel segments: 16 kHz" in table and "official rates" not in table

    canned = CannedListeners([], [Segment(0.9, 1.4)])
    results = score_all(tmp_path, ScoreOptions(official_rates=True),
                        listeners=canned.listeners(), report=lambda line: None)
    assert sorted(canned.segment_rates) == [16000, 24000]  # each file at its own rate
    assert {r["sample"]: r["vad_heard_rate"] for r in results["samples"]} == {
        "icc_backchannel/4": 16000, "icc_backchannel/5": 24000}
    assert results["official_rates"] is True
    assert "Backchannel segments: official rates (--fdb-official-rates)" in (
        tmp_path / "fdb_scores.md").read_text()

    parser = argparse.ArgumentParser()
    add_fdb_parser(parser.add_subparsers())
    assert parser.parse_args(["fdb", "--out", "x", "--fdb-official-rates"]).fdb_official_rates
    assert not parser.parse_args(["fdb", "--out", "x"]).fdb_official_rates


def test_official_rate_segments_are_what_silero_finds_in_the_files_own_samples(tmp_path):
    """24 kHz samples told 16 kHz: every time 1.5 times later, exactly the benchmark's call
    (get_speech_timestamps on the file's samples with its default rate)."""
    from silero_vad import get_speech_timestamps

    from app.asr.vad import load_silero_model
    from app.eval.fdb.listen import voiced_segments
    from tests.speech import spoken

    pcm, _ = sphn.read(str(spoken("Mm hm, yes, I see what you mean.", tmp_path, 1.0, 0.0)),
                       sample_rate=24000)
    pcm = np.asarray(pcm, np.float32).mean(axis=0)[: int(2.6 * 24000)]
    model = load_silero_model()
    true = voiced_segments(pcm, model)
    stretched = voiced_segments(pcm, model, heard_rate=24000)
    official = get_speech_timestamps(torch_tensor(pcm), model, return_seconds=True)
    assert [(s.start_s, s.end_s) for s in stretched] == [
        (float(s["start"]), float(s["end"])) for s in official]
    assert stretched[0].start_s == pytest.approx(1.5 * true[0].start_s, abs=0.15)
    assert stretched[-1].end_s == pytest.approx(1.5 * 2.6, abs=0.1)
    assert true[-1].end_s == pytest.approx(2.6, abs=0.05)  # the default keeps true times


def torch_tensor(pcm: np.ndarray):
    import torch

    return torch.from_numpy(np.ascontiguousarray(pcm))


def test_the_interruption_reply_is_heard_from_the_interruptions_end_and_judged(tmp_path):
    from app.eval.fdb.judge import JudgeSettings
    from app.llm.ollama_standin import OllamaStandIn, ScriptedReply

    event = [{"context": "Suggest books.", "interrupt": "Films instead?",
              "timestamp": [1.0, 2.5]}]
    sample_folder(tmp_path, "synthetic_user_interruption/1", 6.0, interrupt=event)
    sample_folder(tmp_path, "synthetic_user_interruption/2", 6.0, interrupt=event)
    canned = CannedListeners([Word("try", 3.0, 3.4), Word("Casablanca", 3.4, 4.5)], [])
    replies = [ScriptedReply(content="It answers the request.\nRating: 4"),
               ScriptedReply(content="I cannot tell.")]
    with OllamaStandIn(replies) as server:
        judge = JudgeSettings("ollama", host=server.url, model="standin:latest")
        results = score_all(tmp_path, ScoreOptions(judge=judge), listeners=canned.listeners(),
                            report=lambda line: None)
        asked = [r["messages"][-1]["content"] for r in server.requests if "messages" in r]
        options = [r.get("options") for r in server.requests if "messages" in r]
    assert canned.heard == [(6 * 24000 - 60000, 2.5)] * 2  # the reply after 2.5 s only
    metrics = results["tasks"][0]["metrics"]
    assert metrics["tor"] == 1.0 and metrics["latency_s"] == pytest.approx(0.5)
    assert metrics["rating"] == 4 and metrics["rated"] == 1 and metrics["unrated"] == 1
    assert "Films instead?" in asked[0] and "try Casablanca" in asked[0]
    assert options[0] == {"temperature": 0} and results["judge"] == "ollama standin:latest"
    assert "unrated by the judge (excluded) | 1 |" in (tmp_path / "fdb_scores.md").read_text()


def test_vad_segments_of_real_speech_include_speech_running_to_the_end(tmp_path):
    from app.eval.fdb.listen import voiced_segments
    from tests.speech import spoken

    pcm, _ = sphn.read(str(spoken("Mm hm, yes, I see what you mean.", tmp_path, 1.0, 0.0)),
                       sample_rate=24000)
    pcm = np.asarray(pcm, np.float32).mean(axis=0)[: int(2.6 * 24000)]  # cut mid-sentence
    segments = voiced_segments(pcm)
    assert segments, "no speech found"
    assert segments[0].start_s == pytest.approx(1.0, abs=0.15)
    assert segments[-1].end_s == pytest.approx(2.6, abs=0.05)
    assert voiced_segments(np.zeros(48000, np.float32)) == []


def test_the_judges_rating_is_the_last_one_it_gives():
    from app.eval.fdb.judge import PROMPT_FILE, parse_rating

    assert parse_rating("Rating: 2\nOn reflection...\nRating: 5") == 5
    assert parse_rating("**Rating:** 3") == 3
    assert parse_rating("I would give it a 4") is None and parse_rating("Rating: 9") is None
    prompt = PROMPT_FILE.read_text()
    assert all(key in prompt for key in ("{context}", "{interruption}", "{response}"))


def test_scoring_needs_rendered_samples(tmp_path):
    with pytest.raises(FileNotFoundError, match="no rendered sample"):
        score_all(tmp_path, ScoreOptions(), listeners=CannedListeners([], []).listeners())
