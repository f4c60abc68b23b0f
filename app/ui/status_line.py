"""The status bar: model and device, frame time against the 80 ms budget, context, LLM."""

from __future__ import annotations

from PySide6.QtWidgets import QLabel, QProgressBar, QStatusBar, QWidget

from app.session import SessionStatus


class StatusLine(QStatusBar):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state = QLabel("Stopped")
        self.model = QLabel("")
        self.frame = QLabel("")
        self.context = QLabel("")
        self.llm = QLabel("LLM: off")
        self.audio = QLabel("")
        self.busy = QProgressBar(self)  # indeterminate while a model loads and warms up
        self.busy.setRange(0, 0)
        self.busy.setFixedWidth(120)
        self.busy.setFixedHeight(12)
        self.busy.hide()
        self.addWidget(self.busy)
        self.addWidget(self.state, 1)
        for label in (self.model, self.frame, self.context, self.llm, self.audio):
            self.addPermanentWidget(label)

    def show_state(self, text: str, busy: bool = False) -> None:
        self.state.setText(text)
        self.busy.setVisible(busy)

    def show_status(self, status: SessionStatus) -> None:
        self.model.setText(f"{status.model} · {status.device} · {status.dtype}")
        over = status.frame_ms > status.budget_ms
        self.frame.setText(f"frame {status.frame_ms:.0f}/{status.budget_ms:.0f} ms"
                           + (" ⚠" if over else ""))
        self.frame.setStyleSheet("color: #b00020;" if over else "")
        if status.context_window:
            self.context.setText(
                f"context {status.context_used}/{status.context_window}"
                f" ({status.span_positions_in_window} injected)")
        self.llm.setText(f"LLM: {status.llm_state}")
        self.llm.setToolTip(status.llm_message)
        self.llm.setStyleSheet("color: #b00020;" if status.llm_state == "error" else "")
        problems = status.dropped_frames + status.underruns + status.overruns
        self.audio.setText(
            f"audio: {status.dropped_frames} dropped, {status.underruns} under, "
            f"{status.overruns} over" if problems else "audio ok")
