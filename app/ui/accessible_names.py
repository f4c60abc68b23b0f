"""Every control has a name a screen reader can say.

Qt names a button by its text and a field by the label set as its buddy, but a field in a
form row that holds a layout (a field and its button), a combo box (named by its current
value: "Ollama", not "Backend"), a list, a level meter or the transcript is nameless or
misnamed. `name_form_rows` names the fields of a form by their row's label (their name on
Windows and macOS; on Linux Qt gives a combo box's label by relation, which counts too); the
rest are named where they are made. `unnamed_controls` finds what is still without a name (the
test walks every widget of the main window and the settings dialog with it).
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QAccessible
from PySide6.QtWidgets import (
    QAbstractButton,
    QAbstractItemView,
    QAbstractSlider,
    QAbstractSpinBox,
    QComboBox,
    QFormLayout,
    QHeaderView,
    QLabel,
    QLayout,
    QLineEdit,
    QPlainTextEdit,
    QProgressBar,
    QScrollBar,
    QTextEdit,
    QWidget,
)

# What takes input, or shows a value on its own: each needs a name.
CONTROLS = (QAbstractButton, QAbstractItemView, QAbstractSlider, QAbstractSpinBox, QComboBox,
            QLineEdit, QPlainTextEdit, QTextEdit, QProgressBar)
# Composite controls whose inner parts (a combo box's field and list, a line edit's clear
# button) are named through the control itself.
_COMPOSITES = (QComboBox, QLineEdit, QAbstractSpinBox)


def accessible_name(widget: QWidget) -> str:
    """The name assistive technology reads for `widget` (Qt's, derived or set)."""
    interface = QAccessible.queryAccessibleInterface(widget)
    return interface.text(QAccessible.Text.Name) if interface is not None else ""


def _value(widget: QWidget) -> str:
    """What a control holds (its name must be more than that)."""
    if isinstance(widget, QComboBox):
        return widget.currentText()
    if isinstance(widget, QLineEdit):
        return widget.text()
    if isinstance(widget, QAbstractSpinBox):
        return widget.text()
    return ""


def _inner_part(widget: QWidget, top: QWidget) -> bool:
    if isinstance(widget, QScrollBar) or isinstance(widget, QHeaderView) and isinstance(
            widget.parentWidget(), QAbstractItemView):
        return True  # a scroll area's own bars, an item view's (hidden) header
    parent = widget.parentWidget()
    while parent is not None and parent is not top:
        if isinstance(parent, _COMPOSITES):
            return True
        parent = parent.parentWidget()
    return False


def is_control(widget: QWidget, top: QWidget) -> bool:
    """A control of `top`'s window (not a popup's, not Qt's own parts, not a composite's
    inner part); a focusable label (selectable text) counts too."""
    if widget.objectName().startswith("qt_") or widget.window() is not top.window():
        return False
    if _inner_part(widget, top):
        return False
    focusable = widget.focusPolicy() != Qt.FocusPolicy.NoFocus
    return isinstance(widget, CONTROLS) or (isinstance(widget, QLabel) and focusable)


def labelled_by(widget: QWidget) -> list[str]:
    """The labels that name `widget` by relation (a buddy label): on Linux a combo box's
    name is its value, and its label reaches the screen reader this way."""
    interface = QAccessible.queryAccessibleInterface(widget)
    if interface is None:
        return []
    return [other.text(QAccessible.Text.Name)
            for other, _relation in interface.relations(QAccessible.RelationFlag.Label)]


def unnamed_controls(top: QWidget) -> list[QWidget]:
    """The controls in `top` (shown or not) that nothing names: no name of their own, no
    label naming them, and no derived name but their value."""
    found = []
    for widget in [top, *top.findChildren(QWidget)]:
        if not is_control(widget, top):
            continue
        if widget.accessibleName().strip() or any(t.strip() for t in labelled_by(widget)):
            continue
        name = accessible_name(widget).strip()
        if not name or name == _value(widget).strip():
            found.append(widget)
    return found


def label_words(text: str) -> str:
    """A row label as a name: "&Server:" -> "Server"."""
    return text.replace("&&", "\0").replace("&", "").replace("\0", "&").strip().rstrip(":")


def _first_field(layout: QLayout) -> QWidget | None:
    for index in range(layout.count()):
        item = layout.itemAt(index)
        widget = item.widget() if item is not None else None
        if widget is not None and isinstance(widget, CONTROLS) and not isinstance(
                widget, QAbstractButton):
            return widget
        inner = item.layout() if item is not None else None
        if inner is not None:
            found = _first_field(inner)
            if found is not None:
                return found
    return None


def name_form_rows(form: QFormLayout) -> None:
    """Each row's field named by the row's label (a field of a row that is a layout, the
    first input in it), unless it has a name of its own. Call once the rows are made."""
    for row in range(form.rowCount()):
        label_item = form.itemAt(row, QFormLayout.ItemRole.LabelRole)
        field_item = form.itemAt(row, QFormLayout.ItemRole.FieldRole)
        label = label_item.widget() if label_item is not None else None
        if not isinstance(label, QLabel) or field_item is None:
            continue
        words = label_words(label.text())
        if not words:
            continue
        field = field_item.widget()
        row_layout = field_item.layout()
        if field is None and row_layout is not None:
            field = _first_field(row_layout)
        if field is not None and not field.accessibleName():
            field.setAccessibleName(words)
