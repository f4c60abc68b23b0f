"""The pieces every settings tab is drawn with: a form that keeps to the top, grey hints,
and a status line that turns green or red with a test's outcome."""

from __future__ import annotations

from PySide6.QtWidgets import QFormLayout, QLabel, QVBoxLayout, QWidget

OK_COLOR = "#2e7d32"
FAILED_COLOR = "#c62828"


def form_on(page: QWidget) -> QFormLayout:
    """A form on `page` that keeps to the top, however tall the dialog is."""
    outer = QVBoxLayout(page)
    form = QFormLayout()
    outer.addLayout(form)
    outer.addStretch(1)
    return form


def put_on_top(page: QWidget, widget: QWidget) -> None:
    """`widget` above everything on a `form_on` page (the speech engine above the speech
    model's form, the restart hint above both)."""
    layout = page.layout()
    assert isinstance(layout, QVBoxLayout), "not a form_on page"
    layout.insertWidget(0, widget)


def hint(text: str) -> QLabel:
    label = QLabel(text)
    label.setWordWrap(True)
    label.setStyleSheet("color: gray")
    return label


def show_outcome(label: QLabel, text: str, ok: bool | None) -> None:
    """`text` in green (ok), red (failed) or the normal color (None: still going)."""
    color = {True: OK_COLOR, False: FAILED_COLOR, None: ""}[ok]
    label.setStyleSheet(f"color: {color}" if color else "")
    label.setText(text)
