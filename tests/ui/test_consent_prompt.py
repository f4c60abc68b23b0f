"""The window asks before a tool changes something, without stopping anything: a bar above the
transcript (real widgets, offscreen) answers the call waiting on another thread."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import threading

import pytest
from PySide6.QtWidgets import QToolBar

from app.tools.mcp.consent import ConsentAnswer, ConsentBroker, shared_broker
from app.ui.consent_prompt import ConsentPrompt

WAIT_MS = 10_000


def ask_in_background(broker: ConsentBroker, tool: str = "add_event",
                      arguments: dict | None = None,
                      description: str = "Add an event to the user's calendar."
                      ) -> tuple[threading.Thread, list]:
    answers: list[ConsentAnswer] = []
    thread = threading.Thread(target=lambda: answers.append(broker.ask(
        "calendar", tool, description,
        arguments or {"title": "lunch", "day": "Friday"})), daemon=True)
    thread.start()
    return thread, answers


@pytest.fixture()
def prompt(qtbot):
    broker = ConsentBroker(timeout_s=30.0)
    widget = ConsentPrompt(broker)  # hidden until a question waits
    qtbot.addWidget(widget)
    return widget


def test_the_bar_asks_and_allow_lets_the_waiting_call_go(qtbot, prompt):
    assert prompt.isHidden()
    thread, answers = ask_in_background(prompt.broker)
    qtbot.waitUntil(prompt.isVisible, timeout=WAIT_MS)
    text = prompt.question.text()
    assert "run add_event on the tool server “calendar”" in text
    assert "Add an event to the user's calendar." in text
    assert "title='lunch', day='Friday'" in text and "the conversation goes on" in text
    prompt.allow_button.click()
    thread.join(5)
    assert answers == [ConsentAnswer(True)]
    qtbot.waitUntil(prompt.isHidden, timeout=WAIT_MS)


def test_dont_allow_refuses_and_the_oldest_question_comes_first(qtbot, prompt):
    first, first_answer = ask_in_background(prompt.broker, "add_event")
    qtbot.waitUntil(prompt.isVisible, timeout=WAIT_MS)
    second, second_answer = ask_in_background(prompt.broker, "delete_event")
    qtbot.waitUntil(lambda: "1 more waiting" in prompt.question.text(), timeout=WAIT_MS)
    assert "run add_event" in prompt.question.text()
    prompt.deny_button.click()
    first.join(5)
    assert first_answer == [ConsentAnswer(False, "the user did not allow add_event on "
                                                 "calendar")]
    qtbot.waitUntil(lambda: "run delete_event" in prompt.question.text(), timeout=WAIT_MS)
    prompt.session_button.click()
    second.join(5)
    assert second_answer == [ConsentAnswer(True)]
    assert prompt.broker.granted_for_session("calendar")


def test_arguments_are_shown_bounded_and_bidi_controls_visibly(qtbot, prompt):
    thread, answers = ask_in_background(prompt.broker, arguments={"title": "x" * 5000},
                                        description="Attach report\u202egpj.exe to an event.")
    qtbot.waitUntil(prompt.isVisible, timeout=WAIT_MS)
    text = prompt.question.text()
    assert len(text) < 1000 and "\u202e" not in text and "report<U+202E>gpj.exe" in text
    prompt.allow_button.click()
    thread.join(5)


def test_a_window_that_goes_refuses_what_still_waits(qtbot):
    broker = ConsentBroker(timeout_s=30.0)
    widget = ConsentPrompt(broker)
    qtbot.addWidget(widget)
    thread, answers = ask_in_background(broker)
    qtbot.waitUntil(lambda: bool(broker.pending()), timeout=WAIT_MS)
    widget.detach()
    thread.join(5)
    assert answers == [ConsentAnswer(False, "the window that asked was closed")]
    assert not broker.can_ask()


def test_the_main_window_asks_in_a_bar_above_the_transcript(qtbot, bare_window):
    prompt = bare_window.consent_prompt
    assert prompt.broker is shared_broker() and shared_broker().can_ask()
    assert prompt.isHidden()
    thread, answers = ask_in_background(shared_broker())
    qtbot.waitUntil(prompt.isVisible, timeout=WAIT_MS)
    assert bare_window.centralWidget().isAncestorOf(prompt)  # laid out, not floating

    def on_window(widget):
        return widget.rect().translated(widget.mapTo(bare_window, widget.rect().topLeft()))

    bar = on_window(prompt)
    assert bar.bottom() <= on_window(bare_window.transcript).top()  # above the transcript
    assert not any(bar.intersects(on_window(t)) for t in bare_window.findChildren(QToolBar))
    prompt.allow_button.click()
    thread.join(5)
    assert answers == [ConsentAnswer(True)]
