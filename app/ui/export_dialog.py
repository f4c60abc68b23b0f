"""File → Export: the save dialog opens in Documents (then in the last export's folder) and
writes Markdown or JSON by the chosen name."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from PySide6.QtWidgets import QMessageBox, QWidget

from app.conversation.transcript.entries import TranscriptEntry
from app.conversation.transcript.export import TranscriptHeader, export_to_file
from app.ui import safe_file_dialog
from app.ui.ui_state import UiState

FILTERS = "Markdown (*.md);;JSON (*.json)"


def suggested_name(header: TranscriptHeader) -> str:
    started = header.started if header.started is not None else time.time()
    return time.strftime("conversation-%Y-%m-%d-%H%M.md", time.localtime(started))


def export_with_dialog(parent: QWidget, entries: Sequence[TranscriptEntry],
                       header: TranscriptHeader, state: UiState) -> Path | None:
    """Ask where, write, remember the folder; a failure is a message, never a crash."""
    start = state.export_dir / suggested_name(header)
    # Our dialog: Qt's own reads a typed /proc file on the GUI thread (safe_file_dialog.py).
    chosen, selected_filter = safe_file_dialog.save_file_name(
        parent, "Export the conversation", str(start), FILTERS)
    if not chosen:
        return None
    target = Path(chosen)
    if not target.suffix:
        target = target.with_suffix(".json" if "json" in selected_filter.lower() else ".md")
        reason = safe_file_dialog.special_path_reason(target)  # the suffix made it another path
        if reason is not None:
            QMessageBox.warning(parent, "Export failed", f"Could not write {target}: {reason}")
            return None
    try:
        export_to_file(entries, target, header)
    except (OSError, ValueError) as exc:
        QMessageBox.warning(parent, "Export failed", f"Could not write {target}: {exc}")
        return None
    state.export_dir = target.parent
    return target
