"""The window's question when one of the user's tools wants to change something.

An MCP server's tool that is not read-only asks first (app/tools/mcp/consent.py). The
question is this bar above the transcript, never a modal dialog: the conversation goes on
(the voice has been told to wait) and the user answers when they have read it. It shows the
server, the tool, what it does and with which arguments, and offers: Allow (this once),
Allow for this session (this server's tools ask no more until the app closes), Don't allow.
Several waiting questions are answered oldest first.

The bar polls the broker on a timer (it holds plain data behind a lock): no Qt object is
touched from the tool's thread. While the bar exists it is the window that can be asked;
when it goes, questions still waiting are refused (nobody is left to answer them).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from app.display_text import visible_controls
from app.text_bounds import bounded
from app.tools.mcp.consent import ConsentBroker, ConsentRequest, Decision, shared_broker

_ARGUMENTS_SHOWN = 300
_DESCRIPTION_SHOWN = 200


def describe_arguments(arguments: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in arguments.items()) or "no arguments"


class ConsentPrompt(QFrame):
    POLL_MS = 100

    def __init__(self, broker: ConsentBroker | None = None,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.broker = broker or shared_broker()
        self._request: ConsentRequest | None = None
        self._seen = -1
        self.setStyleSheet("ConsentPrompt { background: #fff4e5; border: 1px solid #f0b86e; }")
        layout = QVBoxLayout(self)
        self.question = QLabel("")
        self.question.setWordWrap(True)
        self.question.setMinimumWidth(1)  # a long argument must not widen the window
        layout.addWidget(self.question)
        row = QHBoxLayout()
        self.allow_button = QPushButton("Allow")
        self.session_button = QPushButton("Allow for this session")
        self.deny_button = QPushButton("Don't allow")
        for button in (self.allow_button, self.session_button, self.deny_button):
            row.addWidget(button)
        row.addStretch(1)
        layout.addLayout(row)
        self.allow_button.clicked.connect(self._allow)
        self.session_button.clicked.connect(self._allow_for_session)
        self.deny_button.clicked.connect(self._deny)
        self.hide()
        self._detach = self.broker.attach_prompt()
        self.destroyed.connect(self._detach)  # the detach holds the broker, not this widget
        self._timer = QTimer(self)
        self._timer.setInterval(self.POLL_MS)
        self._timer.timeout.connect(self.refresh)
        self._timer.start()

    def detach(self) -> None:
        """No more questions come here (the window closes): those waiting are refused."""
        self._timer.stop()
        self._detach()

    def refresh(self) -> None:
        if self.broker.version == self._seen:
            return
        self._seen = self.broker.version
        pending = self.broker.pending()
        if not pending:
            self._request = None
            self.hide()
            return
        request = min(pending, key=lambda r: r.request_id)
        self._request = request
        more = len(pending) - 1
        description = bounded(" ".join(request.description.split()), _DESCRIPTION_SHOWN)
        text = (f"The assistant wants to run {request.tool} on the tool server "
                f"“{request.server}”: {description} With: "
                f"{bounded(describe_arguments(request.arguments), _ARGUMENTS_SHOWN)}. "
                "It may change things, so it waits for you; the conversation goes on.")
        if more:
            text += f" ({more} more waiting after this one.)"
        self.question.setText(visible_controls(text))
        self.show()

    def _allow(self, *_checked: object) -> None:
        self._answer("allow")

    def _allow_for_session(self, *_checked: object) -> None:
        self._answer("allow_session")

    def _deny(self, *_checked: object) -> None:
        self._answer("deny")

    def _answer(self, decision: Decision) -> None:
        request = self._request
        if request is not None:
            self.broker.answer(request.request_id, decision)
            self._seen = -1
            self.refresh()
