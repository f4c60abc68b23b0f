"""The status bar: model and device, frame time against the 80 ms budget, context, LLM.

Every field elides (the whole text is its tooltip), so the window's minimum width never
depends on what the fields say; after a conversation stops the figures are dropped.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent
from PySide6.QtWidgets import QProgressBar, QStatusBar, QWidget

from app.conversation.session import SessionStatus
from app.frames import FRAME_S
from app.ui.elided_label import ElidedLabel
from app.ui.theme import warning_color


class StatusLine(QStatusBar):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state = ElidedLabel("Stopped", max_width=480)
        self.model = ElidedLabel("", max_width=260)
        self.frame = ElidedLabel("", max_width=160)
        self.context = ElidedLabel("", max_width=220)
        self.llm = ElidedLabel("LLM: off", max_width=200)
        self.audio = ElidedLabel("", max_width=220)
        self.asr = ElidedLabel("", max_width=240)
        self.busy = QProgressBar(self)  # indeterminate while a model loads and warms up
        self.busy.setRange(0, 0)
        self.busy.setFixedWidth(120)
        self.busy.setFixedHeight(12)
        self.busy.hide()
        self.addWidget(self.busy)
        self.addWidget(self.state, 1)
        for label in (self.model, self.frame, self.context, self.llm, self.audio, self.asr):
            self.addPermanentWidget(label)
        self.last_status: SessionStatus | None = None
        self._warn_frame = False
        self._warn_llm = False
        self._warn_asr = False

    def show_state(self, text: str, busy: bool = False) -> None:
        self.state.setText(text)
        self.busy.setVisible(busy)

    def show_status(self, status: SessionStatus) -> None:
        self.last_status = status
        where = f"on {status.server}" if status.server else status.dtype
        self.model.setText(" · ".join(part for part in (status.model, status.device, where)
                                      if part))
        if status.server:  # the model runs on a server: the network, not its frame time
            self._show_network(status)
        else:
            self._warn_frame = status.frame_ms > status.budget_ms
            self.frame.setText(f"frame {status.frame_ms:.0f}/{status.budget_ms:.0f} ms"
                               + (" ⚠" if self._warn_frame else ""))
        if status.context_window:
            self.context.setText(
                f"context {status.context_used}/{status.context_window}"
                f" ({status.span_positions_in_window} injected)")
        self.llm.setText(f"LLM: {status.llm_state}")
        self.llm.setToolTip(f"LLM: {status.llm_state}"
                            + (f" — {status.llm_message}" if status.llm_message else ""))
        self._warn_llm = status.llm_state == "error"
        problems = status.dropped_frames + status.underruns + status.overruns
        self.audio.setText(
            f"audio: {status.dropped_frames} dropped, {status.underruns} under, "
            f"{status.overruns} over" if problems else "audio ok")
        # The recognizer falling behind loses the user's words: shown apart, in red.
        self._warn_asr = status.asr_dropped_frames > 0
        missed_s = status.asr_dropped_frames * FRAME_S
        self.asr.setText(f"speech recognition missed {missed_s:.1f} s" if self._warn_asr else "")
        self.asr.setToolTip(
            f"The speech recognizer fell behind and never heard "
            f"{status.asr_dropped_frames} audio frames ({missed_s:.1f} s)"
            ": the computer is too busy. Words in those moments may be missing from your turns."
            if self._warn_asr else "")
        self._colour_warnings()

    def _show_network(self, status: SessionStatus) -> None:
        """Round trip of the audio to the server and back, and frames too late to play."""
        self._warn_frame = not status.connected
        if not status.connected:
            self.frame.setText("server: disconnected")
        else:
            rtt = "–" if status.network_rtt_ms is None else f"{status.network_rtt_ms:.0f} ms"
            self.frame.setText(f"network {rtt} · {status.late_frames} late")
        self.frame.setToolTip(
            "Round trip of an audio frame to the speech server and back (median of the last "
            "2 s), and how many frames came back too late to be played on time.")

    def clear_figures(self) -> None:
        """The conversation stopped: nothing measured any more is shown as if it were."""
        self.last_status = None
        for label in (self.model, self.frame, self.context, self.audio, self.asr):
            label.setText("")
        self.asr.setToolTip("")
        self.llm.setText("LLM: off")
        self._warn_frame = self._warn_llm = self._warn_asr = False
        self._colour_warnings()

    def _colour_warnings(self) -> None:
        red = warning_color(self.palette())
        self.frame.set_colour(red if self._warn_frame else None)
        self.llm.set_colour(red if self._warn_llm else None)
        self.asr.set_colour(red if self._warn_asr else None)

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802 - Qt's name
        super().changeEvent(event)
        if event.type() == QEvent.Type.PaletteChange:
            self._colour_warnings()
