"""When the audio stalls, resume it by itself (a few times), instead of asking each time.

On a busy machine the audio callbacks can stop coming for a couple of seconds while the
devices are still there (app/audio/live_audio.py tells a stall from an unplugged device).
The devices work again once the machine catches up, so the conversation opens them again by
itself after a short pause, and says so. A machine that stalls again and again is asked to
be resumed by hand (Resume), so that a driver that hangs does not reopen in a loop.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

RESUME_AFTER_S = 1.0  # the pause before the devices are opened again
MOST_RESUMES = 3  # by itself, within …
WINDOW_S = 60.0  # … this long; more stalls than that wait for Resume


@dataclass
class StallResumer:
    """Decides when a stalled conversation's audio is opened again by itself."""

    after_s: float = RESUME_AFTER_S
    most: int = MOST_RESUMES
    window_s: float = WINDOW_S
    _resumed: deque[float] = field(default_factory=deque)

    def after_stall(self, now: float) -> float | None:
        """A stall at `now` (monotonic seconds): when to open the devices again, or None when
        it stalled too often of late (Resume, by hand, then)."""
        while self._resumed and now - self._resumed[0] > self.window_s:
            self._resumed.popleft()
        if len(self._resumed) >= self.most:
            return None
        self._resumed.append(now)
        return now + self.after_s

    def stalls_of_late(self) -> int:
        return len(self._resumed)
