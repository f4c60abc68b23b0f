"""Issue 35, item 19: four widgets of the app had accessible names; a screen reader read the
rest as nameless, or a combo box by its value ("Ollama" for the backend). Every widget of
the main window and of each Settings page is walked, shown or not, and each control has a
name that says what it is (app/ui/accessible_names.py)."""

from __future__ import annotations

from PySide6.QtWidgets import QWidget

from app.conversation.transcript.entries import TranscriptEntry
from app.ui.accessible_names import accessible_name, is_control, labelled_by, unnamed_controls
from app.ui.settings.dialog import SettingsDialog


def described(widgets) -> list[str]:
    return [f"{type(w).__name__} {accessible_name(w)!r} (tooltip {w.toolTip()[:40]!r})"
            for w in widgets]


def test_every_control_of_the_main_window_has_a_name(bare_window):
    window = bare_window
    # What shows only now and then is walked too: a pending request's bar, the find bar.
    window.controller.entry.emit(TranscriptEntry(1, "thinking", "“Is it raining?”", 0.0,
                                                 final=False))
    window.features.search_bar.open_bar()
    controls = [w for w in [window, *window.findChildren(QWidget)]
                if is_control(w, window)]
    assert len(controls) > 20  # the walk reached the window's controls
    assert described(unnamed_controls(window)) == []


def test_every_control_of_the_settings_dialog_has_a_name(qtbot, bare_window):
    dialog = SettingsDialog(bare_window.settings, catalog=None, stt_models=None,
                            list_voices=lambda *_: [])
    qtbot.addWidget(dialog)
    dialog.show()
    for index in range(dialog.tabs.count()):  # every page
        dialog.tabs.setCurrentIndex(index)
    assert described(unnamed_controls(dialog)) == []
    backend = dialog.llm_tab.backend_combo  # named "Backend", not "Ollama" (its value)
    assert backend.accessibleName() == "Backend" and labelled_by(backend) == ["Backend:"]
