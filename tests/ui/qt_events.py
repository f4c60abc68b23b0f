"""Letting Qt do what it has posted: a test that changed a widget lets the event loop run a
few rounds (layouts, repaints, queued signals) before it reads the widget back."""

from __future__ import annotations

from PySide6.QtWidgets import QApplication


def settle(rounds: int = 8) -> None:
    """Run the event loop's pending work `rounds` times (work a round posts runs in the next)."""
    for _ in range(rounds):
        QApplication.processEvents()
