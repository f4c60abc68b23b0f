"""The status bar: model and device, frame time against the 80 ms budget, context, LLM.

Every field elides (the whole text is its tooltip), so the window's minimum width never
depends on what the fields say; after a conversation stops the figures are dropped. When the
window is too narrow for all of them, the fields step aside by priority rather than each being
cut to a letter: the state, the warnings and the LLM stay readable, and what stepped aside is
listed in the tooltip of a "+N" mark at the end of the bar.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QSize
from PySide6.QtGui import QCursor, QResizeEvent
from PySide6.QtWidgets import QLabel, QProgressBar, QStatusBar, QToolTip, QWidget

from app.conversation.session import SessionStatus
from app.frames import FRAME_S
from app.ui.elided_label import ElidedLabel
from app.ui.theme import warning_color

READABLE_CHARS = 10  # an elided field keeps about this many characters, or steps aside
GAP_PX = 10  # between two fields
LISTENING = "Listening"  # what a running session says it does (session.py)
SPEAKING = "Speaking (and listening)"
SPEAKING_DB = -50.0  # what the speaker plays above this level is the model's voice
STATE_TIPS = {
    LISTENING: "The speech model hears you; it answers when it has something to say.",
    SPEAKING: "The speech model is talking (its voice is playing); it hears you while it "
              "speaks, so you can interrupt it.",
}
LLM_STATE_TIPS = {
    "idle": "{llm} is ready, waiting for a question (what you type, or what it hears you "
            "ask).",
    "thinking": "{llm} is answering a question; its answer is read to the speech model "
                "when it comes (Esc cancels it).",
    "off": "No LLM is asked in this conversation: the speech model talks on its own.",
}


class StatusFields(QWidget):
    """The fields in one row, placed by hand (no layout: hiding a field re-lays nothing
    out). The first field is left-aligned and takes what is left over; the others sit at
    the right. In the order of `rank` each field gets what it asks for, or what is left if
    that is enough to read; one that cannot is hidden and named in the `more` mark."""

    def __init__(self, fields: list[ElidedLabel], busy: QWidget,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.fields = fields  # in display order, the first one at the left
        self.busy = busy
        self.more = QLabel(self)  # "+2": the fields that stepped aside, in its tooltip
        self.more.hide()
        for widget in (busy, *fields):
            widget.setParent(self)
        self.rank = {id(field): index for index, field in enumerate(fields)}

    def set_ranks(self, ranked: list[ElidedLabel]) -> None:
        """Which field keeps its room first (the most important first)."""
        self.rank = {id(field): index for index, field in enumerate(ranked)}
        self.arrange()

    def sizeHint(self) -> QSize:  # Qt's name
        shown = [f for f in self.fields if f.text()]
        width = sum(f.sizeHint().width() for f in shown) + GAP_PX * max(0, len(shown) - 1)
        return QSize(width, self._height())

    def minimumSizeHint(self) -> QSize:  # Qt's name
        return QSize(0, self._height())  # the fields step aside, they never hold the window

    def _height(self) -> int:
        return max([f.sizeHint().height() for f in self.fields] + [self.busy.height()])

    def event(self, event: QEvent) -> bool:
        if event.type() == QEvent.Type.LayoutRequest:  # a field's text (its size hint) changed
            self.arrange()
            self.updateGeometry()
        return super().event(event)

    def resizeEvent(self, event: QResizeEvent) -> None:  # Qt's name
        super().resizeEvent(event)
        self.arrange()

    @staticmethod
    def readable_width(field: ElidedLabel) -> int:
        """The least a field is shown at: its first few characters and the ellipsis."""
        text = field.text()
        short = text if len(text) <= READABLE_CHARS else text[:READABLE_CHARS] + "…"
        return min(field.sizeHint().width(),
                   field.fontMetrics().horizontalAdvance(short) + field.full_width()
                   - field.fontMetrics().horizontalAdvance(text))

    def arrange(self) -> None:
        width, height = self.width(), self.height()
        busy = self.busy.width() + GAP_PX if not self.busy.isHidden() else 0
        candidates = sorted((f for f in self.fields if f.text()),
                            key=lambda f: self.rank.get(id(f), len(self.rank)))
        kept, dropped = self._allot(candidates, width - busy)
        more_w = 0
        if dropped:  # room for the mark that names them, as wide as it can be
            more_w = self.more.fontMetrics().horizontalAdvance(f"+{len(candidates)}") + 2
            kept, dropped = self._allot(candidates, width - busy - more_w - GAP_PX)
        # Text and visibility are set only when they change: each change asks for a new
        # arrangement (a LayoutRequest), and an unchanged one must not ask again.
        mark = f"+{len(dropped)}" if dropped else ""
        tip = "\n".join([_more_heading(len(dropped))] + [_described(f) for f in self.fields
                                                          if f in dropped]) if dropped else ""
        if self.more.text() != mark:
            self.more.setText(mark)
        if self.more.toolTip() != tip:
            shown_now = QToolTip.isVisible() and QToolTip.text() == self.more.toolTip()
            self.more.setToolTip(tip)
            if shown_now:  # a tooltip on screen is not redrawn by Qt: it said "+1" under "+2"
                if tip:
                    QToolTip.showText(QCursor.pos(), tip, self.more)
                else:
                    QToolTip.hideText()
        for widget, wanted in ((self.more, bool(dropped)),
                               *((field, field in kept) for field in self.fields)):
            if widget.isHidden() == wanted:
                widget.setVisible(wanted)
        shown = [f for f in self.fields if f in kept]
        right = width
        if dropped:
            self.more.setGeometry(right - more_w, 0, more_w, height)
            right -= more_w + GAP_PX
        for field in reversed(shown[1:] if shown and shown[0] is self.fields[0] else shown):
            right -= kept[field]
            field.setGeometry(right, 0, kept[field], height)
            right -= GAP_PX
        x = 0
        if busy:
            self.busy.move(0, (height - self.busy.height()) // 2)
            x = busy
        first = self.fields[0]
        if first in kept:  # the left field takes what is left over
            first.setGeometry(x, 0, max(kept[first], right + GAP_PX - x), height)

    def _allot(self, ranked: list[ElidedLabel],
               room: int) -> tuple[dict[ElidedLabel, int], list[ElidedLabel]]:
        """Widths by priority: each field what it asks for, or what is left if that is
        enough to read; else it steps aside (a later, shorter one may still fit)."""
        kept: dict[ElidedLabel, int] = {}
        used = 0
        for field in ranked:
            gap = GAP_PX if kept else 0
            width = min(field.sizeHint().width(), room - used - gap)
            if width >= self.readable_width(field):
                kept[field] = width
                used += gap + width
        return kept, [f for f in ranked if f not in kept]


def _more_heading(hidden: int) -> str:
    """The first line of the "+N" mark's tooltip: what the mark is."""
    plural = "s" if hidden > 1 else ""
    return (f"{hidden} more status field{plural}, hidden for want of room (widen the window "
            "to see them):")


def describe_audio(status: SessionStatus) -> tuple[str, str]:
    """The audio field's text and its tooltip, which says what each count is."""
    lost, gaps, skips = status.dropped_frames, status.underruns, status.overruns
    if not lost + gaps + skips:
        return "audio ok", ("Audio ok: the speech model has heard every microphone frame, "
                            "and its voice has played without gaps or skips.")
    text = f"audio: {lost} lost · {gaps} gaps · {skips} skips"
    tip = "\n".join([
        "Audio problems in this conversation so far:",
        f"- {lost} lost: {lost} microphone frames ({lost * FRAME_S:.1f} s) the speech model "
        "never heard, because it fell behind; words said then may be missing.",
        f"- {gaps} gaps: the speaker ran out of the model's voice and played silence (the "
        "voice came late).",
        f"- {skips} skips: the speaker's buffer overflowed and the oldest of the model's "
        "voice was dropped.",
        "A computer too busy for the speech model causes all three.",
    ])
    return text, tip


def _described(field: ElidedLabel) -> str:
    """A hidden field in the mark's tooltip: its own tooltip when that starts with its text
    (and says more), else its text and the tooltip."""
    text, tip = field.text(), field.toolTip()
    if not tip or tip.startswith(text):
        return tip or text
    return f"{text} — {tip}"


def network_words(status: SessionStatus) -> tuple[str, str]:
    """A server's model: the status bar's words for the link, and their tooltip. An audio
    frame's round trip is two parts, said apart: the network's own round trip, and what the
    frame spends at the server (queued there, then stepped)."""
    if not status.connected:
        return ("server: disconnected", "The connection to the speech server is down; the "
                "conversation reconnects on its own (Resume tries at once).")

    def ms(value: float | None) -> str:
        return "–" if value is None else f"{value:.0f} ms"

    codec = {"opus": "Opus", "pcm": "uncompressed PCM"}.get(status.audio_codec, "")
    audio = f" The audio goes as {codec}." if codec else ""
    text = (f"network {ms(status.network_rtt_ms)} · server {ms(status.server_ms)} · "
            f"{status.late_frames} late")
    tip = (f"network: the connection's own round trip to the speech server (a ping); "
           f"server: what an audio frame spends at the server, waiting and being stepped "
           f"(its round trip, {ms(status.frame_rtt_ms)}, less the network's); late: audio "
           f"frames that came back too late to be played on time, "
           f"{status.late_frames} so far.{audio}")
    return text, tip


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
        self.busy.setAccessibleName("Loading")
        self.busy.hide()
        self.fields = StatusFields([self.state, self.model, self.frame, self.context, self.llm,
                                    self.audio, self.asr], self.busy, self)
        self.addPermanentWidget(self.fields, 1)
        self.last_status: SessionStatus | None = None
        self._llm_name = ""  # the LLM the settings name ("qwen3:4b on Ollama"); "": none
        self._llm_where = ""  # … and its address
        self._state_detail = ""  # the session's words for its state ("Listening")
        self.last_late_frames = 0  # a server's model: late frames shown last time
        self._warn_frame = False
        self._warn_llm = False
        self._warn_asr = False
        self._rank()

    def set_llm_choice(self, backend: str, model: str, host: str) -> None:
        """The LLM the settings name: what the field says while no conversation runs, and
        what its tooltips name while one does."""
        from app.conversation.transcript.builder import llm_label

        self._llm_name = "" if backend == "none" else llm_label(backend, model)
        self._llm_where = "" if backend == "none" else host
        if self.last_status is None:
            self._show_llm_choice()

    def _show_llm_choice(self) -> None:
        if not self._llm_name:
            self.llm.setText("LLM: off")
            self.llm.setToolTip("No assistant LLM is set: the speech model talks on its own. "
                                "Choose one in Settings → Assistant (LLM).")
            return
        short = self._llm_name.split(" on ")[0]
        self.llm.setText(f"LLM: {short}")
        where = f" at {self._llm_where}" if self._llm_where else ""
        self.llm.setToolTip(f"The assistant: {self._llm_name}{where}. It is asked once a "
                            "conversation runs (Settings → Assistant (LLM) tests it).")

    def show_state(self, text: str, busy: bool = False, tip: str = "") -> None:
        """The session's words for its state; `tip`: what the tooltip says instead of the
        text's usual explanation (an error's whole message)."""
        self._state_detail = text
        self._show_state_text(text)
        if tip:
            self.state.setToolTip(tip)
        self.busy.setVisible(busy)
        self.fields.arrange()

    def _show_state_text(self, text: str) -> None:
        self.state.setText(text)
        self.state.setToolTip(STATE_TIPS.get(text, text))

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
            spans = status.span_positions_in_window
            self.context.setText(f"context {status.context_used}/{status.context_window}"
                                 f" ({spans} injected)")
            self.context.setToolTip(
                f"{self.context.text()}: the speech model's context window holds "
                f"{status.context_window:,} positions; {status.context_used:,} are in use, "
                f"{spans:,} of them by injected spans (View → What the model knows lists "
                "them).")
        if self._state_detail == LISTENING:  # full duplex: it hears you while it speaks
            self._show_state_text(SPEAKING if status.speaker_db > SPEAKING_DB else LISTENING)
        self.llm.setText(f"LLM: {status.llm_state}")
        llm = self._llm_name or "The LLM"
        explained = LLM_STATE_TIPS.get(status.llm_state, f"{llm}: {status.llm_state}")
        self.llm.setToolTip(explained.format(llm=llm)
                            + (f" — {status.llm_message}" if status.llm_message else ""))
        self._warn_llm = status.llm_state in ("error", "unreachable", "model missing")
        audio, audio_tip = describe_audio(status)
        self.audio.setText(audio)
        self.audio.setToolTip(audio_tip)
        # The recognizer falling behind loses the user's words: shown apart, in red.
        self._warn_asr = status.asr_dropped_frames > 0
        missed_s = status.asr_dropped_frames * FRAME_S
        self.asr.setText(f"speech recognition missed {missed_s:.1f} s" if self._warn_asr else "")
        self.asr.setToolTip(
            f"{self.asr.text()}: the speech recognizer fell behind and never heard "
            f"{status.asr_dropped_frames} audio frames"
            ". The computer is too busy; words in those moments may be missing from your turns."
            if self._warn_asr else "")
        self._colour_warnings()

    def _show_network(self, status: SessionStatus) -> None:
        """The link to the server in its parts (network_words), red while frames come back
        too late to play."""
        late_before = self.last_late_frames
        self.last_late_frames = status.late_frames
        self._warn_frame = not status.connected or status.late_frames > late_before
        text, tip = network_words(status)
        self.frame.setText(text)
        self.frame.setToolTip(tip)

    def clear_figures(self) -> None:
        """The conversation stopped: nothing measured any more is shown as if it were."""
        self.last_status = None
        self.last_late_frames = 0
        for label in (self.model, self.frame, self.context, self.audio, self.asr):
            label.setText("")
        self.asr.setToolTip("")
        self._show_llm_choice()
        self._warn_frame = self._warn_llm = self._warn_asr = False
        self._colour_warnings()

    def _colour_warnings(self) -> None:
        red = warning_color(self.palette())
        self.frame.set_colour(red if self._warn_frame else None)
        self.llm.set_colour(red if self._warn_llm else None)
        self.asr.set_colour(red if self._warn_asr else None)
        self._rank()

    def _rank(self) -> None:
        """What keeps its room first when the bar is narrow: the state, then a field in
        warning red, then the LLM, the frame time (or network), the context, audio, model."""
        order = [self.state, self.asr, self.llm, self.frame, self.context, self.audio,
                 self.model]
        warned = {id(self.frame): self._warn_frame, id(self.llm): self._warn_llm,
                  id(self.asr): self._warn_asr}
        self.fields.set_ranks(sorted(order, key=lambda f: (f is not self.state,
                                                           not warned.get(id(f), False))))

    def changeEvent(self, event: QEvent) -> None:  # Qt's name
        super().changeEvent(event)
        if event.type() == QEvent.Type.PaletteChange:
            self._colour_warnings()
