"""`eval fdb` rendering: the benchmark's layout, the input's timeline, resume, broken samples,
and the prompts persona checkpoints get."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import sphn

from app.eval.fdb.layout import CONVERSATION_PROMPT, TEACHER_PROMPT, Sample, find_samples
from app.eval.fdb.render import FDB_CONVERSATION, RenderOptions, render_all, voice_for
from app.eval.fdb.timeline_audio import on_timeline
from tests.eval.fdb.render_settings import SPAN_ANSWER, TAIL_S
from tests.eval.fdb.runner_spy import counting_runner


def samples_and_rate(path: Path) -> tuple[int, int]:
    pcm, rate = sphn.read(str(path))
    return pcm.shape[-1], rate


def test_every_sample_is_rendered_in_the_benchmarks_layout_on_its_inputs_timeline(
        rendered, fdb_data):
    out = rendered.out
    turn = out / "candor_turn_taking" / "1"
    names = {p.name for p in turn.iterdir()}
    expected = {"contextspan_render.json", "contextspan_run.jsonl", "input.wav", "output.wav",
                "transcription.json", "turn_taking.json"}
    assert expected <= names and names - expected <= {"contextspan_asr.json"}  # once scored
    overlap = out / "v1_5/user_interruption/3"
    assert {"clean_input.wav", "clean_output.wav", "metadata.json",
            "contextspan_clean_run.jsonl"} <= {p.name for p in overlap.iterdir()}
    # Nothing but task folders and our summaries at the root; no scratch left behind.
    assert {p.name for p in out.iterdir()} - {"fdb_scores.json", "fdb_scores.md"} == {
        "candor_turn_taking", "fdb_render.json", "v1_5"}

    for name, (samples, rate) in fdb_data.lengths.items():
        reply = out / name.replace("input.wav", "output.wav")
        got, got_rate = samples_and_rate(reply)
        assert got_rate == 16000
        # The input's timeline at 16 kHz, and the tail of silence the engine heard after it.
        assert got == round(samples * 16000 / rate) + round(TAIL_S * 16000), name
        assert samples_and_rate(out / name) == (samples, rate)  # the copy is untouched
    pcm, _ = sphn.read(str(turn / "output.wav"))
    assert np.abs(pcm).max() > 0.0  # the tiny model babbles: a reply, not silence
    record = json.loads((turn / "contextspan_render.json").read_text())
    assert record["prompt"] is None and record["prompt_used"] is False  # tiny: no persona
    assert any("prompts" in n and "unused" in n for n in rendered.report.notes)


def test_the_whole_pipeline_runs_asr_llm_and_injection_while_rendering(rendered):
    """The user's turn is heard by the ASR, the LLM is asked, and its answer is injected
    into the speech model, all recorded in the sample's run log."""
    log = [json.loads(line) for line in
           (rendered.out / "candor_turn_taking/1/contextspan_run.jsonl").read_text().splitlines()]
    kinds = [r["type"] for r in log]
    assert "user" in kinds and "turn" in kinds, kinds
    spans = [r for r in log if r["type"] == "span"]
    assert spans and spans[0]["text"].startswith(SPAN_ANSWER[:10]) and spans[0]["chunks"]
    assert "complete" not in spans[0]  # landed whole before the input ended
    assert log[-1]["type"] == "end"
    assert rendered.llm_requests
    record = json.loads((rendered.out / "candor_turn_taking/1/contextspan_render.json")
                        .read_text())
    assert record["llm_side"] is True and record["spans"] >= 1


def test_a_corrupt_sample_is_reported_and_skipped_without_a_folder(rendered):
    report = rendered.report
    assert report.rendered == 2 and report.stopped is None
    assert [sample for sample, _ in report.failed] == ["candor_pause_handling/2"]
    assert "unreadable" in " ".join(rendered.lines)
    assert not (rendered.out / "candor_pause_handling").exists()
    summary = json.loads((rendered.out / "fdb_render.json").read_text())
    assert summary["failed"][0][0] == "candor_pause_handling/2"
    # With a tail, the engine hears a padded copy of each input (named by which input).
    assert sorted(rendered.calls) == ["clean.input.wav", "main.input.wav", "main.input.wav"]


def test_a_second_run_renders_only_what_is_missing(rendered, fdb_data):
    out = rendered.out
    options = RenderOptions(conversation=replace(FDB_CONVERSATION, device="cpu"), seed=7,
                            tail_s=TAIL_S)
    calls: list[str] = []
    again = render_all(fdb_data.root, out, options, runner=counting_runner(calls),
                       report=lambda line: None)
    assert calls == [] and again.already_done == 2 and again.rendered == 0

    reply = out / "candor_turn_taking/1/output.wav"
    reply.unlink()
    again = render_all(fdb_data.root, out, options, runner=counting_runner(calls),
                       report=lambda line: None)
    assert calls == ["main.input.wav"] and again.rendered == 1 and again.already_done == 1
    assert reply.is_file()


def test_the_reply_keeps_its_timing_through_the_resampling():
    """A click 0.5 s into the 24 kHz reply is 0.5 s into the 16 kHz output.wav."""
    pcm = np.zeros(24000, dtype=np.float32)
    pcm[12000:12024] = 0.9
    out = on_timeline(pcm, 16001, 16000)
    assert len(out) == 16001 and not out[16000:].any()
    assert abs(int(np.argmax(np.abs(out))) - 8000) <= 12


class FakeRunner:
    """Stands in for run_headless: records its arguments, writes a silent reply."""

    def __init__(self, fail: Exception | None = None) -> None:
        self.calls: list[dict] = []
        self.fail = fail

    def __call__(self, config, run):
        self.calls.append({"input": Path(run.input_path), "role": config.role,
                           "voice": config.voice})
        if self.fail is not None:
            raise self.fail
        sphn.write_wav(str(run.output_path), np.zeros(2400, np.float32), 24000)
        Path(run.transcript_path).write_text("")
        return None


def test_persona_checkpoints_get_the_benchmarks_prompt_for_each_task(fdb_data, tmp_path):
    runner = FakeRunner()
    render_all(fdb_data.root, tmp_path, RenderOptions(
        conversation=replace(FDB_CONVERSATION, model_id="tiny-persona"),
        voice_pool=("v0", "v1", "v2")),
               runner=runner, report=lambda line: None)
    roles = {str(c["input"].relative_to(fdb_data.root)): c["role"] for c in runner.calls}
    assert roles == {
        "candor_turn_taking/1/input.wav": CONVERSATION_PROMPT,
        "v1_5/user_interruption/3/clean_input.wav": TEACHER_PROMPT,
        "v1_5/user_interruption/3/input.wav": TEACHER_PROMPT,
    }
    record = json.loads((tmp_path / "candor_turn_taking/1/contextspan_render.json").read_text())
    assert record["prompt"] == CONVERSATION_PROMPT and record["prompt_used"] is True
    # The voice is drawn per sample from a hash of its path: the same on every run.
    sample = find_samples(fdb_data.root)[1]
    assert voice_for(sample, RenderOptions(voice_pool=("v0", "v1", "v2"))) == voice_for(
        Sample(Path("/elsewhere"), sample.rel), RenderOptions(voice_pool=("v0", "v1", "v2")))
    assert {c["voice"] for c in runner.calls} <= {"v0", "v1", "v2"}

    runner = FakeRunner()
    render_all(fdb_data.root, tmp_path / "plain", RenderOptions(
        conversation=replace(FDB_CONVERSATION, voice="v1")),
               runner=runner, report=lambda line: None)
    assert {(c["role"], c["voice"]) for c in runner.calls} == {(None, None)}


def test_an_engine_that_fails_every_sample_stops_the_run(fdb_data, tmp_path):
    from app.conversation.run_request import HeadlessRunError

    data = tmp_path / "data"
    shutil.copytree(fdb_data.root / "candor_turn_taking", data / "candor_turn_taking")
    for n in range(2, 6):
        shutil.copytree(data / "candor_turn_taking/1", data / f"candor_turn_taking/{n}")
    runner = FakeRunner(HeadlessRunError("no such voice"))
    report = render_all(data, tmp_path / "out", RenderOptions(), runner=runner,
                        report=lambda line: None)
    assert len(runner.calls) == 3 and report.stopped and "no such voice" in report.stopped
    assert not (tmp_path / "out/candor_turn_taking").exists()


def test_samples_are_found_at_any_depth_with_their_task(fdb_data):
    found = [str(s.rel) for s in find_samples(fdb_data.root)]
    assert found == ["candor_pause_handling/2", "candor_turn_taking/1",
                     "v1_5/user_interruption/3"]
    # A task folder given as the root keeps its name: the output root stays above tasks.
    inner = find_samples(fdb_data.root / "candor_turn_taking")
    assert [str(s.rel) for s in inner] == ["candor_turn_taking/1"]
    assert [str(s.rel) for s in find_samples(fdb_data.root, ("user_interruption",))] == [
        "v1_5/user_interruption/3"]


@pytest.mark.parametrize("flag", ["--render-only", "--score-only"])
def test_the_command_line_parses_its_steps(flag, tmp_path):
    import argparse

    from app.eval.fdb.cli import add_fdb_parser

    parser = argparse.ArgumentParser()
    add_fdb_parser(parser.add_subparsers(dest="eval"))
    args = parser.parse_args(["fdb", "--out", str(tmp_path), flag, "--voice-pool", "f0,f1"])
    assert getattr(args, flag[2:].replace("-", "_")) is True
    assert args.seed == 42424242 and args.sample_rate == 16000
    with pytest.raises(SystemExit):
        parser.parse_args(["fdb", "--out", str(tmp_path), "--render-only", "--score-only"])
