"""`bench soak` as a short smoke run: a live conversation on the null sink, with spoken
questions recognised, answered by the stand-in LLM and injected, and the device counters
read from the running streams."""

from __future__ import annotations

from app.audio.live_audio import LiveAudio
from app.bench.soak_bench import run_soak_bench


class CountingLiveAudio(LiveAudio):
    """The real device streams; counters() also says how often it was read."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.reads = 0

    def counters(self) -> dict[str, int]:
        self.reads += 1
        return {**super().counters(), "reads": self.reads}


def _counting(settings) -> LiveAudio:
    audio = settings.audio
    return CountingLiveAudio(input_device=audio.input_device,
                             output_device=audio.output_device, echo_mode=audio.echo_mode)


def test_a_short_soak_is_a_live_conversation_with_device_counters(tiny_folder, tiny_stt_built):
    # 30 s, and on a machine too busy for real time, on until one answer landed (bounded).
    result = run_soak_bench(minutes=0.5, audio_factory=_counting, sample_every_s=5.0,
                            until_spans=1, give_up_after_minutes=4.0)
    assert result["states"][-1] == "stopped" and "paused" not in result["states"]
    talk = result["conversation"]
    assert talk["user_turns_recognised"] >= 1, result
    assert talk["llm_turns_started"] >= 1
    assert talk["spans_from_turns"] >= 1  # an answer to a recognised turn landed
    assert talk["turn_failures"] == 0
    samples = result["audio_counters_over_time"]
    assert len(samples) >= 4
    reads = [s["reads"] for s in samples]
    assert reads == sorted(set(reads))  # each sample is a fresh counters() read
    captured = [s["frames_captured"] for s in samples]
    assert captured[1:] == sorted(set(captured[1:])) and captured[-1] > 0
    assert result["audio_counters_end"]["reads"] > reads[-1]
    assert "stand-in" in result["parts"]["llm"] and "digital loopback" in result["parts"]["audio"]
    assert len(result["rss_mb_over_time"]) == len(samples)
