"""Help → About: the version, the speech model and the device it runs on."""

from __future__ import annotations

import importlib.metadata
import platform

from PySide6 import __version__ as pyside_version
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QMessageBox, QWidget


def app_version() -> str:
    try:
        return importlib.metadata.version("contextspan")
    except importlib.metadata.PackageNotFoundError:  # run from a checkout, not installed
        return "unknown (not installed)"


def about_text(model: str, device: str, llm: str = "") -> str:
    lines = [
        f"ContextSpan {app_version()}",
        "A full-duplex voice assistant whose LLM findings are span-injected into the "
        "speech model's own context.",
        "",
        f"Speech model: {model or 'none chosen'}",
        f"Device: {device or 'not running'}",
    ]
    if llm:
        lines.append(f"LLM: {llm}")
    lines.append(f"Python {platform.python_version()} · PySide6 {pyside_version}")
    from app.log_setup import log_path

    lines.append(f"Log: {log_path()}")
    return "\n".join(lines)


def about_box(parent: QWidget, model: str, device: str, llm: str = "") -> QMessageBox:
    """The About box, shown window-modal without blocking (close it with OK or Esc)."""
    box = QMessageBox(QMessageBox.Icon.Information, "About ContextSpan",
                      about_text(model, device, llm), QMessageBox.StandardButton.Ok, parent)
    box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)  # closed, it dies (GUI thread)
    box.open()
    return box
