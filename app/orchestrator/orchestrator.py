"""The orchestrator: decides when to ask the LLM, runs the tool loop, queues spans.

One control thread owns all decisions (single writer, no locks on its state); each LLM
turn runs on a worker thread and reports back through the control queue, so a slow or
dead backend never blocks anything, and a stale turn's result is simply dropped. The
frame loop is never waited on: spans go to the engine's non-blocking `inject`.
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from app.asr.events import AsrFinal, AsrPartial
from app.engine.events import AudioOut, SpanInjected, TextPiece
from app.llm.backend import ChatMessage, LLMBackend, LLMError
from app.orchestrator.conversation_log import ConversationLog
from app.orchestrator.events import (
    LlmStatus,
    OrchestratorEvent,
    SpanQueued,
    ToolCalled,
    TurnCancelled,
    TurnFailed,
    TurnLatency,
    TurnStarted,
)
from app.orchestrator.span_writer import speakable_span
from app.orchestrator.turn_policy import is_clear_question, normalize
from app.tools.base import ToolRegistry

log = logging.getLogger(__name__)

SYSTEM_PROMPT = (
    "You are the research assistant behind a voice assistant. Another model does the "
    "talking; you find the facts it needs to answer the user's latest question. Use the "
    "tools when the answer needs current, local or exact information. Reply with the facts "
    "only, in plain text, as one to three short sentences a person could say aloud: no "
    "markdown, no lists, no preamble. If nothing useful can be found, reply with nothing."
)


class SpanSink(Protocol):
    def inject(self, text: str, source: str, at_frame: int = 0) -> int: ...


@dataclass(frozen=True)
class OrchestratorOptions:
    max_tool_rounds: int = 3
    max_calls_per_round: int = 4
    max_span_chars: int = 600  # well inside the injector's token budget
    context_chars: int = 4000
    mid_turn: bool = True
    min_words_to_cancel: int = 3
    system_prompt: str = SYSTEM_PROMPT


@dataclass
class _Turn:
    turn_id: int
    question: str
    utterance_start_s: float | None  # which user utterance it answers (None: typed)
    cancel: threading.Event = field(default_factory=threading.Event)
    end_of_speech: float | None = None  # monotonic time the user stopped speaking
    detected: float = 0.0  # monotonic time the turn was started
    first_token: float | None = None
    span_ready: float | None = None
    span_id: int | None = None
    injected: float | None = None
    injected_before_frame: int | None = None


@dataclass(frozen=True)
class _TurnAnswer:
    turn_id: int
    text: str
    tools: tuple[str, ...]
    first_token: float | None


@dataclass(frozen=True)
class _TurnError:
    turn_id: int
    error: LLMError


_STOP = object()


class Orchestrator:
    def __init__(
        self,
        backend: LLMBackend,
        tools: ToolRegistry,
        sink: SpanSink,
        options: OrchestratorOptions | None = None,
        clock: Callable[[], float] = time.monotonic,
        events: queue.SimpleQueue | None = None,
    ) -> None:
        self.backend = backend
        self.tools = tools
        self.sink = sink
        self.options = options or OrchestratorOptions()
        self.events: queue.SimpleQueue[OrchestratorEvent] = events or queue.SimpleQueue()
        self._clock = clock
        self._inbox: queue.Queue[object] = queue.Queue()
        self._log = ConversationLog()
        self._ids = itertools.count(1)
        self._current: _Turn | None = None  # the turn whose answer we still want
        self._awaiting: dict[int, _Turn] = {}  # span id -> turn, until its first audio
        self._workers: list[threading.Thread] = []
        self._thread: threading.Thread | None = None

    # ---- any thread -------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="orchestrator", daemon=True)
        self._thread.start()

    def on_asr_event(self, event: object) -> None:
        self._inbox.put((self._clock(), event))

    def on_engine_event(self, event: object) -> None:
        if isinstance(event, (TextPiece, SpanInjected, AudioOut)):
            self._inbox.put((self._clock(), event))

    def on_typed_text(self, text: str) -> None:
        self._inbox.put((self._clock(), ("typed", text)))

    def stop(self, timeout: float = 5.0) -> bool:
        self._inbox.put((self._clock(), _STOP))
        if self._current is not None:
            self._current.cancel.set()
        ok = True
        if self._thread is not None:
            self._thread.join(timeout)
            ok = not self._thread.is_alive()
        for worker in self._workers:
            worker.join(timeout)
            ok = ok and not worker.is_alive()
        return ok

    def idle(self) -> bool:
        """No turn in flight and nothing waiting in the inbox (for tests and benchmarks)."""
        return self._inbox.empty() and self._current is None and not any(
            w.is_alive() for w in self._workers)

    # ---- control thread ---------------------------------------------------------------

    def _emit(self, event: OrchestratorEvent) -> None:
        self.events.put(event)

    def _run(self) -> None:
        while True:
            try:
                received, item = self._inbox.get(timeout=0.2)
            except queue.Empty:
                self._workers = [w for w in self._workers if w.is_alive()]
                continue
            if item is _STOP:
                return
            try:
                self._handle(received, item)
            except Exception as exc:  # the conversation goes on; the status says why
                log.exception("orchestrator failed on %r", item)
                self._emit(LlmStatus("error", f"internal error: {exc}"))

    def _handle(self, received: float, item: object) -> None:
        if isinstance(item, AsrFinal):
            self._on_final(received, item)
        elif isinstance(item, AsrPartial):
            self._on_partial(received, item)
        elif isinstance(item, tuple) and item and item[0] == "typed":
            self._log.add_user(item[1])
            self._start_turn(item[1], None, "typed", end_of_speech=received)
        elif isinstance(item, TextPiece):
            self._log.add_assistant_piece(item.text, item.frame_index)
        elif isinstance(item, SpanInjected):
            turn = self._awaiting.get(item.span_id)
            if turn is not None:
                turn.injected = item.monotonic_s
                turn.injected_before_frame = item.last_frame
        elif isinstance(item, AudioOut):
            self._on_audio(item)
        elif isinstance(item, _TurnAnswer):
            self._on_answer(received, item)
        elif isinstance(item, _TurnError):
            self._on_error(item)

    def _on_partial(self, received: float, partial: AsrPartial) -> None:
        current = self._current
        if current is not None and current.utterance_start_s is not None and (
                current.utterance_start_s < partial.start_s
                and len(normalize(partial.text).split()) >= self.options.min_words_to_cancel):
            # A new utterance makes the old turn stale; a short backchannel ("mm") does not.
            self._cancel("the user spoke again")
            current = None
        if (self.options.mid_turn and current is None and is_clear_question(partial.text)):
            self._start_turn(partial.text, partial.start_s, "mid_turn", end_of_speech=None)

    def _on_final(self, received: float, final: AsrFinal) -> None:
        if not final.text.strip():
            return
        self._log.add_user(final.text)
        # The user stopped speaking `detected_at_s - end_s` seconds of audio before we knew.
        end_of_speech = received - max(0.0, final.detected_at_s - final.end_s)
        current = self._current
        if current is not None and current.utterance_start_s == final.start_s and (
                normalize(current.question) == normalize(final.text)):
            current.end_of_speech = end_of_speech  # the mid-turn request asked the same thing
            return
        if current is not None:
            self._cancel("the question changed" if current.utterance_start_s == final.start_s
                         else "the user spoke again")
        self._start_turn(final.text, final.start_s, "end_of_turn", end_of_speech)

    def _cancel(self, reason: str) -> None:
        if self._current is None:
            return
        self._current.cancel.set()
        self._emit(TurnCancelled(self._current.turn_id, reason))
        self._current = None

    def _start_turn(self, question: str, utterance_start_s: float | None, trigger: str,
                    end_of_speech: float | None) -> None:
        self._cancel("a newer question arrived")
        turn = _Turn(next(self._ids), question, utterance_start_s,
                     end_of_speech=end_of_speech, detected=self._clock())
        self._current = turn
        self._emit(TurnStarted(turn.turn_id, question, trigger))
        self._emit(LlmStatus("thinking", f"asking {self.backend.name}"))
        messages = self._log.messages(self.options.context_chars)
        if not messages or messages[-1].role != "user" or messages[-1].content != question:
            messages.append(ChatMessage("user", question))
        worker = threading.Thread(target=self._work, args=(turn, messages),
                                  name=f"llm-turn-{turn.turn_id}", daemon=True)
        self._workers = [w for w in self._workers if w.is_alive()] + [worker]
        worker.start()

    def _on_answer(self, received: float, answer: _TurnAnswer) -> None:
        turn = self._current
        if turn is None or turn.turn_id != answer.turn_id:
            return  # stale: cancelled while the LLM was still working
        self._current = None
        turn.first_token = answer.first_token
        turn.span_ready = received
        self._emit(LlmStatus("idle", f"{self.backend.name} answered"))
        if not answer.text:
            self._emit(TurnLatency(turn.turn_id, *self._stages(turn)))
            return
        source = "+".join(("llm",) + answer.tools)
        span_id = self.sink.inject(answer.text, source)
        turn.span_id = span_id
        self._awaiting[span_id] = turn
        self._emit(SpanQueued(turn.turn_id, span_id, answer.text, source))

    def _on_error(self, error: _TurnError) -> None:
        turn = self._current
        if turn is None or turn.turn_id != error.turn_id:
            return
        self._current = None
        if error.error.kind == "cancelled":
            return
        self._emit(TurnFailed(turn.turn_id, error.error.kind, str(error.error)))
        self._emit(LlmStatus("error", str(error.error)))

    def _on_audio(self, audio: AudioOut) -> None:
        for span_id, turn in list(self._awaiting.items()):
            if turn.injected_before_frame is not None and (
                    audio.frame_index >= turn.injected_before_frame):
                del self._awaiting[span_id]
                self._emit(TurnLatency(turn.turn_id, *self._stages(turn, audio.monotonic_s)))

    @staticmethod
    def _ms(a: float | None, b: float | None) -> float | None:
        return None if a is None or b is None else round((b - a) * 1000.0, 3)

    def _stages(self, turn: _Turn, first_audio: float | None = None) -> tuple:
        ms = self._ms
        return (
            ms(turn.end_of_speech, turn.detected),
            ms(turn.detected, turn.first_token),
            ms(turn.first_token, turn.span_ready),
            ms(turn.span_ready, turn.injected),
            ms(turn.injected, first_audio),
            ms(turn.end_of_speech, first_audio),
        )

    # ---- worker thread ----------------------------------------------------------------

    def _work(self, turn: _Turn, history: list[ChatMessage]) -> None:
        try:
            answer = self._tool_loop(turn, history)
        except LLMError as exc:
            self._inbox.put((self._clock(), _TurnError(turn.turn_id, exc)))
            return
        except Exception as exc:  # a backend bug becomes a failed turn, not a dead thread
            log.exception("LLM turn failed")
            error = LLMError("malformed", f"{self.backend.name} failed: {exc}")
            self._inbox.put((self._clock(), _TurnError(turn.turn_id, error)))
            return
        self._inbox.put((self._clock(), answer))

    def _tool_loop(self, turn: _Turn, history: list[ChatMessage]) -> _TurnAnswer:
        messages = [ChatMessage("system", self.options.system_prompt), *history]
        first_token: list[float] = []
        used: list[str] = []

        def on_delta(_fragment: str) -> None:
            if not first_token:
                first_token.append(self._clock())

        specs = self.tools.specs()
        for round_index in range(self.options.max_tool_rounds + 1):
            if turn.cancel.is_set():
                raise LLMError("cancelled", "cancelled")
            started = self._clock()
            allow_tools = specs if round_index < self.options.max_tool_rounds else []
            result = self.backend.chat(messages, allow_tools, on_delta, turn.cancel)
            if not first_token and result.first_token_s is not None:
                first_token.append(started + result.first_token_s)
            if not result.tool_calls or not allow_tools:
                text = speakable_span(result.content, self.options.max_span_chars)
                return _TurnAnswer(turn.turn_id, text, tuple(dict.fromkeys(used)),
                                   first_token[0] if first_token else None)
            messages.append(ChatMessage("assistant", result.content,
                                        tool_calls=result.tool_calls))
            for call in result.tool_calls[: self.options.max_calls_per_round]:
                outcome = self.tools.call(call.name, call.arguments, turn.cancel)
                self.events.put(ToolCalled(
                    turn.turn_id, call.name, dict(call.arguments), outcome.ok, outcome.error,
                    outcome.source, len(outcome.content), outcome.truncated))
                if outcome.ok:
                    used.append(call.name)
                content = outcome.content if outcome.ok else f"error: {outcome.error}"
                messages.append(ChatMessage("tool", content, tool_name=call.name))
        raise LLMError("malformed", "the LLM kept calling tools")  # unreachable in practice
