"""Colours that must stay readable on a light and on a dark desktop."""

from __future__ import annotations

from PySide6.QtGui import QColor, QPalette

_WARNING_ON_LIGHT = QColor("#b00020")
_WARNING_ON_DARK = QColor("#ff8a80")


def is_dark(palette: QPalette) -> bool:
    """A dark desktop: the palette's base (what text sits on) is dark."""
    return palette.color(QPalette.ColorRole.Base).lightness() < 128


def warning_color(palette: QPalette) -> QColor:
    """Red for a budget overrun or an error: dark red on light, light red on dark."""
    return QColor(_WARNING_ON_DARK if is_dark(palette) else _WARNING_ON_LIGHT)


def dark_palette() -> QPalette:
    """A dark desktop palette (Fusion's roles), for the dark screenshot and the tests."""
    palette = QPalette()
    roles = QPalette.ColorRole
    for role, colour in (
        (roles.Window, "#2b2b2b"), (roles.WindowText, "#e6e6e6"), (roles.Base, "#1e1e1e"),
        (roles.AlternateBase, "#2b2b2b"), (roles.ToolTipBase, "#2b2b2b"),
        (roles.ToolTipText, "#e6e6e6"), (roles.Text, "#e6e6e6"), (roles.Button, "#353535"),
        (roles.ButtonText, "#e6e6e6"), (roles.BrightText, "#ff5555"),
        (roles.Highlight, "#3d7bd9"), (roles.HighlightedText, "#ffffff"),
        (roles.PlaceholderText, "#8a8a8a"), (roles.Link, "#8ab4f8"), (roles.Mid, "#404040"),
        (roles.Dark, "#191919"), (roles.Light, "#505050"), (roles.Shadow, "#000000"),
    ):
        palette.setColor(role, QColor(colour))
    for role in (roles.Text, roles.ButtonText, roles.WindowText):
        palette.setColor(QPalette.ColorGroup.Disabled, role, QColor("#7a7a7a"))
    return palette
