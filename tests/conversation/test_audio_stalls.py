"""Issue 35, item 17: after a stall the audio starts again by itself, a few times a minute;
a machine that stalls again and again waits for Resume (a hung driver is not reopened in a
loop). The rule, on its own clock."""

from __future__ import annotations

from app.conversation.audio_stalls import MOST_RESUMES, RESUME_AFTER_S, WINDOW_S, StallResumer


def test_stalls_resume_by_themselves_a_few_times_a_minute() -> None:
    resumer = StallResumer()
    times = [100.0 + 5 * n for n in range(MOST_RESUMES)]
    assert [resumer.after_stall(t) for t in times] == [t + RESUME_AFTER_S for t in times]
    assert resumer.after_stall(times[-1] + 5) is None  # one too many: Resume, by hand
    later = times[0] + WINDOW_S + 1  # the first has left the minute: one more by itself
    assert resumer.after_stall(later) == later + RESUME_AFTER_S
