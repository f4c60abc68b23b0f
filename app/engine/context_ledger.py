"""Accounting of the temporal transformer's positions: frames and injected spans."""

from __future__ import annotations

from collections import deque

from app.engine.events import ContextUsage


class ContextLedger:
    def __init__(self, window: int) -> None:
        self.window = window
        self.frame_positions = 0
        self.span_positions = 0
        self._spans: deque[tuple[int, int]] = deque()  # (first position, length)

    @property
    def total(self) -> int:
        return self.frame_positions + self.span_positions

    def add_frames(self, count: int = 1) -> None:
        self.frame_positions += count
        self._forget_old()

    def add_span_positions(self, count: int) -> None:
        self._spans.append((self.total, count))
        self.span_positions += count
        self._forget_old()

    def _forget_old(self) -> None:
        start = self.total - self.window
        while self._spans and sum(self._spans[0]) <= start:
            self._spans.popleft()

    def span_positions_in_window(self) -> int:
        start = max(0, self.total - self.window)
        return sum(max(0, first + length - max(first, start)) for first, length in self._spans)

    def usage(self) -> ContextUsage:
        return ContextUsage(
            window=self.window,
            used=min(self.total, self.window),
            frame_positions=self.frame_positions,
            span_positions=self.span_positions,
            span_positions_in_window=self.span_positions_in_window(),
            wrapped=self.total > self.window,
        )
