"""`bench pipeline`: spoken questions through the real ASR and VAD, so the end of turn is
detected from speech, and every number says what it includes."""

from __future__ import annotations

from app.bench.pipeline_bench import STAGES, run_pipeline_bench


def test_end_of_turn_detection_is_in_the_loop_and_the_stand_in_is_labelled(
        tiny_folder, tiny_stt_built):
    # Generous per-turn timeout: a loaded machine makes the ASR fall behind real time.
    result = run_pipeline_bench("tiny", turns=2, device="cpu", turn_timeout_s=90.0)
    assert result["completed"] >= 1, result["failures"]
    hang = result["end_of_turn"]["vad_hang_ms"]
    assert hang >= 500
    # A turn cannot start before the VAD's hang has run out after the speech ended:
    # a logical bound, not a timing.
    for row in result["per_turn_ms"]:
        assert row["end_of_speech_to_turn_ms"] > hang, row
        assert row["end_of_speech_to_first_audio_ms"] > row["end_of_speech_to_turn_ms"]
    assert result["stages_ms"]["end_of_speech_to_turn_ms"]["n"] == len(result["per_turn_ms"])
    assert "Silero VAD" in result["end_of_turn"]["detector"]

    llm = result["llm"]
    assert "stand-in" in llm["server"]
    assert llm["scripted_delays_ms"] == {"first_token_of_the_tool_call_reply": 20.0,
                                         "between_chunks_of_the_answer": 2.0}
    includes = result["includes"]
    assert all(f"stages_ms.{name}" in includes for name in STAGES)
    assert "detection included" in includes["stages_ms.end_of_speech_to_first_audio_ms"]
    assert "scripted" in includes["stages_ms.turn_to_first_token_ms"]
