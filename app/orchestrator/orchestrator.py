"""The orchestrator: decides when to ask the LLM, runs the tool loop, queues spans.

One control thread owns all decisions (single writer, no locks on its state); each LLM
turn runs on a worker thread and reports back through the control queue, so a slow or
dead backend never blocks anything, and a stale turn's result is simply dropped. The
frame loop is never waited on: spans go to the engine's non-blocking `inject`. Everything
posted to the control queue is a named message (messages.py), handled by the one handler of
its type; a worker gets what it reads of the conversation as a snapshot taken on the control
thread, never the live log.

Of the engine's audio the orchestrator keeps only the clock: each frame made (`FrameMade`,
the newest frame is the conversation's time) and, once per landed span, the first frame
after it (`FirstAudioAfterSpan`), which ends the turn's latency.

What starts a turn is the checkpoint's (its manifest's `retrieval`): the user's end of turn
for models never trained to ask, or the model's own <ret> token (retrieval.py) for the
Context Spanning checkpoint, whose answers carry a deadline in conversation time. Typed
questions start a turn either way.

Each LLM request is told to the conversation's clock (live_clock.py's `AnswerClock`). In
a replay (a run fed from a file faster than real time passes a `ReplayClock`,
replay_clock.py) the request holds the conversation's clock where it was asked; its answer
is handled when the conversation reaches the frame it would have reached in real time
(after that frame's other events), and lands before it. A slow laptop and a fast GPU then
give the same conversation for the same LLM latency, and a scripted LLM's (the stand-in's)
for the same script. A live conversation's clock (`LiveClock`) holds nothing and defers
nothing: its answers land as they come.
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from app.asr.events import AsrEvent, AsrFinal, AsrPartial, AsrWord
from app.checkpoints.catalog import Retrieval
from app.engine.events import (
    AudioOut,
    EngineEvent,
    EngineReady,
    FirstAudioAfterSpan,
    RetToken,
    SpanInjected,
    SpanLate,
    TextPiece,
)
from app.frames import FRAME_S
from app.llm.backend import CancelEvent, ChatMessage, LLMBackend, LLMError
from app.orchestrator.conversation_log import ConversationLog
from app.orchestrator.events import (
    AnswerNotInjected,
    LlmStatus,
    NoSpan,
    OrchestratorEvent,
    RetrievalIgnored,
    RetrievalLate,
    RetrievalQuestion,
    SpanQueued,
    ToolCalled,
    ToolWaiting,
    TurnCancelled,
    TurnFailed,
    TurnLatency,
    TurnStarted,
)
from app.orchestrator.live_clock import AnswerClock, LiveClock
from app.orchestrator.messages import (
    Cancel,
    Configure,
    Fence,
    FrameMade,
    InboxMessage,
    Received,
    Stop,
    ToolDone,
    ToolWait,
    TurnAnswer,
    TurnError,
    Typed,
)
from app.orchestrator.retrieval import (
    UtteranceTracker,
    frames_of,
    normalise_question,
    retrieve,
)
from app.orchestrator.span_budget import budget_instruction, span_chars
from app.orchestrator.span_writer import speakable_span_cut
from app.orchestrator.turn_policy import is_clear_question, normalize, user_spoke
from app.tools.base import ToolRegistry, ToolResult, WaitNotice

log = logging.getLogger(__name__)

SYSTEM_PROMPT = (
    "You are the research assistant behind a voice assistant. Another model does the "
    "talking; you find the facts it needs to answer the user's latest question. Use the "
    "tools when the answer needs current, local or exact information. Reply with the facts "
    "only, in plain text, as one to three short sentences a person could say aloud: no "
    "markdown, no lists, no preamble. If nothing useful can be found, reply with nothing."
)


class SpanSink(Protocol):
    def inject(self, text: str, source: str, at_frame: int = 0,
               origin_frame: int | None = None, deadline_frame: int | None = None) -> int: ...


@dataclass(frozen=True)
class OrchestratorOptions:
    max_tool_rounds: int = 3
    max_calls_per_round: int = 4
    max_span_chars: int = 600  # well inside the injector's token budget
    context_chars: int = 4000
    mid_turn: bool = True
    min_words_to_cancel: int = 3
    system_prompt: str = SYSTEM_PROMPT
    # What starts a turn (the checkpoint's manifest); None: the user's end of turn.
    retrieval: Retrieval | None = None
    profile: str = ""  # the user's name and city, for the retrieval router
    # The engine's span budget when it was measured before this orchestrator was made (the
    # LLM turned on mid-conversation, after EngineReady); 0: learnt from EngineReady.
    span_tokens: int = 0


@dataclass
class _Turn:
    turn_id: int
    question: str
    utterance_start_s: float | None  # which user utterance it answers (None: typed)
    # A CancelEvent: setting it closes the turn's HTTP request at once, not at the next chunk.
    cancel: threading.Event = field(default_factory=CancelEvent)
    # What the turn asks with, fixed when it starts: new settings apply to the next turn.
    backend: LLMBackend | None = None
    tools: ToolRegistry | None = None
    end_of_speech: float | None = None  # monotonic time the user stopped speaking
    detected: float = 0.0  # monotonic time the turn was started
    first_token: float | None = None
    span_ready: float | None = None
    span_id: int | None = None
    injected: float | None = None
    ret_frame: int | None = None  # a turn the model's <ret> started
    # A tool of it waited for the user (its permission): the voice was told to wait, so
    # a <ret>'s deadline no longer holds.
    waited_for_user: bool = False


@dataclass
class _PendingRetrieval:
    """From <ret> until its span lands, is dropped, or there is none: a second <ret> in
    that time is ignored, as the reference does."""

    ret_frame: int
    wait_until_frame: int | None = None  # plan "wait": settle by this frame at the latest
    turn: _Turn | None = None
    span_id: int | None = None


class Orchestrator:
    def __init__(
        self,
        backend: LLMBackend,
        tools: ToolRegistry,
        sink: SpanSink,
        options: OrchestratorOptions | None = None,
        clock: Callable[[], float] = time.monotonic,
        events: queue.SimpleQueue[OrchestratorEvent] | None = None,
        replay_clock: AnswerClock | None = None,
    ) -> None:
        """`replay_clock`: a run fed from a file faster than real time (the LLM's latency
        replayed in frames, see the module's docstring); None: frames come in real time
        (a `LiveClock`)."""
        self.backend = backend
        self.tools = tools
        self._retired: list[tuple[LLMBackend, ToolRegistry]] = []  # replaced by reconfigure
        self.sink = sink
        self.options = options or OrchestratorOptions()
        # Its own queue: where its events wait when nobody gave it a sink.
        self.events: queue.SimpleQueue[OrchestratorEvent] = events or queue.SimpleQueue()
        self._sink: Callable[[OrchestratorEvent], None] = self.events.put
        self._clock = clock
        self._inbox: queue.Queue[InboxMessage] = queue.Queue()
        self._log = ConversationLog()
        self._ids = itertools.count(1)
        self._current: _Turn | None = None  # the turn whose answer we still want
        self._awaiting: dict[int, _Turn] = {}  # span id -> turn, until its first audio
        self._workers: list[threading.Thread] = []
        self._thread: threading.Thread | None = None
        retrieval = self.options.retrieval
        self._ret_policy = retrieval if retrieval and retrieval.trigger == "ret_token" else None
        self._tracker = UtteranceTracker(retrieval.window_s if retrieval else 12.0)
        self._retrieval: _PendingRetrieval | None = None
        self._frame = -1  # the newest frame the engine produced: the conversation's clock
        # The conversation's clock: a replay's holds and defers; a live one's does nothing.
        self.answer_clock: AnswerClock = replay_clock if replay_clock is not None \
            else LiveClock()
        # The engine's span budget once it is ready (EngineReady.span_tokens): 0, unknown.
        self._span_tokens = 0
        self._max_span_chars = self.options.max_span_chars
        self._learn_span_budget(self.options.span_tokens)
        # One handler per inbox message type, and per type of event a `Received` carries.
        self._handlers: dict[type, Callable[[Any], None]] = {
            Received: self._on_received, FrameMade: self._on_frame, Typed: self._on_typed,
            Cancel: self._on_cancel, Configure: self._on_configure, Fence: self._on_fence,
            TurnAnswer: self._on_result, TurnError: self._on_result,
            ToolWait: self._on_tool_wait, ToolDone: self._on_tool_done,
        }
        self._event_handlers: dict[type, Callable[[Any, float], None]] = {
            AsrWord: self._on_word, AsrPartial: self._on_partial, AsrFinal: self._on_final,
            RetToken: self._on_ret, SpanLate: self._on_span_late, TextPiece: self._on_text,
            SpanInjected: self._on_span_injected, FirstAudioAfterSpan: self._on_first_audio,
            EngineReady: self._on_engine_ready,
        }

    # ---- any thread -------------------------------------------------------------------

    def send_events_to(self, sink: Callable[[OrchestratorEvent], None]) -> None:
        """Its events go to `sink` instead of its own queue (the pipeline's router); given
        before `start`."""
        self._sink = sink

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="orchestrator", daemon=True)
        self._thread.start()

    def on_asr_event(self, event: AsrEvent) -> None:
        self._inbox.put(Received(event, self._clock()))

    @property
    def model_triggered(self) -> bool:
        """True when the speech model's own <ret> starts LLM turns (not the user's turn)."""
        return self._ret_policy is not None

    def on_engine_event(self, event: EngineEvent) -> None:
        """An engine event; of an AudioOut only its frame is kept (the clock)."""
        if isinstance(event, AudioOut):
            self._inbox.put(FrameMade(event.frame_index))
        elif type(event) in self._event_handlers:
            self._inbox.put(Received(event, self._clock()))

    def on_typed_text(self, text: str) -> None:
        self._inbox.put(Typed(text, self._clock()))

    def after_pending(self, callback: Callable[[], None]) -> None:
        """Call `callback` on the control thread once everything queued before it has been
        handled (the replay feeder's barrier)."""
        self._inbox.put(Fence(callback))

    def cancel_pending(self, reason: str = "cancelled by the user") -> None:
        """Drop the LLM request in flight (Esc, the Cancel button): its connection is closed
        at once and a TurnCancelled says so. Nothing happens when no request is pending."""
        self._inbox.put(Cancel(reason))

    def reconfigure(self, backend: LLMBackend, tools: ToolRegistry) -> None:
        """Settings changed during the conversation: the next turn asks `backend` with
        `tools`. A turn in flight finishes with what it started with."""
        self._inbox.put(Configure(backend, tools))

    def stop(self, timeout: float = 5.0) -> bool:
        """Cancelling closes the requests in flight, so their workers end at once; all the
        joins share one deadline."""
        deadline = time.monotonic() + timeout
        self._inbox.put(Stop())
        self.answer_clock.stop()  # a feeder waiting on the clock is let go
        if self._current is not None:
            self._current.cancel.set()
        pending = self._retrieval
        if pending is not None and pending.turn is not None:
            pending.turn.cancel.set()
        ok = True
        if self._thread is not None:
            self._thread.join(max(0.0, deadline - time.monotonic()))
            ok = not self._thread.is_alive()
        for worker in self._workers:
            worker.join(max(0.0, deadline - time.monotonic()))
            ok = ok and not worker.is_alive()
        self._close_clients()
        return ok

    def _close_clients(self) -> None:
        """The conversation is over: the LLM clients' pooled connections and the tools'
        files (the local-search index) are released, also those replaced mid-conversation."""
        retired, self._retired = self._retired, []
        for backend, tools in [*retired, (self.backend, self.tools)]:
            for close in (getattr(backend, "close", None), getattr(tools, "close", None)):
                if callable(close):
                    try:
                        close()
                    except Exception:  # closing must not stop the rest from closing
                        log.exception("closing %r failed", close)

    def idle(self) -> bool:
        """No turn in flight and nothing waiting in the inbox (for tests and benchmarks)."""
        return (self._inbox.empty() and self._current is None and self._retrieval is None
                and not any(w.is_alive() for w in self._workers))

    # ---- control thread ---------------------------------------------------------------

    def _emit(self, event: OrchestratorEvent) -> None:
        self._sink(event)

    def _hold(self, turn: _Turn) -> None:
        """Replay: `turn`'s request (about to start) holds the clock from the newest frame
        (a <ret>'s own frame: its token comes before that frame's audio)."""
        asked = max(self._frame, -1 if turn.ret_frame is None else turn.ret_frame)
        self.answer_clock.hold(turn.turn_id, asked)

    def _release(self, turn_id: int) -> None:
        self.answer_clock.release(turn_id)

    def _run(self) -> None:
        while True:
            try:
                message = self._inbox.get(timeout=0.2)
            except queue.Empty:
                self._workers = [w for w in self._workers if w.is_alive()]
                continue
            if isinstance(message, Stop):
                return
            try:
                self._handle(message)
            except Exception as exc:  # the conversation goes on; the status says why
                log.exception("orchestrator failed on %r", message)
                self._emit(LlmStatus("error", f"internal error: {exc}"))

    def _handle(self, message: InboxMessage) -> None:
        self._handlers[type(message)](message)

    # ---- the inbox's messages, one handler each -----------------------------------------

    def _on_received(self, received: Received) -> None:
        handler = self._event_handlers.get(type(received.event))
        if handler is not None:  # the recogniser's other events are not the LLM's business
            handler(received.event, received.at)

    def _on_frame(self, frame: FrameMade) -> None:
        self._frame = frame.frame_index
        self._settle_waiting()

    def _on_typed(self, typed: Typed) -> None:
        self._log.add_user(typed.text)
        self._start_turn(typed.text, None, "typed", end_of_speech=typed.at)

    def _on_cancel(self, cancel: Cancel) -> None:
        self._cancel_pending(cancel.reason)

    def _on_configure(self, configure: Configure) -> None:
        # A turn in flight may still be asking the old backend: closed at stop().
        self._retired.append((self.backend, self.tools))
        self.backend, self.tools = configure.backend, configure.tools

    def _on_fence(self, fence: Fence) -> None:
        try:
            for result in self.answer_clock.due(self._frame):  # replay: the answers due now
                self._settle(result)
        finally:
            fence.callback()

    def _on_tool_wait(self, wait: ToolWait) -> None:
        """A turn's tool waits for the user: the voice is told to wait (a short span, as
        any answer is told to it) and the transcript says why. A stale turn's is dropped."""
        turn = self._current if self._current and self._current.turn_id == wait.turn_id \
            else None
        pending = self._retrieval
        if turn is None and pending is not None and pending.turn is not None \
                and pending.turn.turn_id == wait.turn_id:
            turn = pending.turn
        if turn is None:
            return
        turn.waited_for_user = True
        try:
            span_id: int | None = self.sink.inject(wait.text, "wait")
        except RuntimeError:  # the conversation is ending: the wait is still shown
            span_id = None
        self._emit(ToolWaiting(turn.turn_id, wait.tool, wait.server, wait.text, span_id))

    def _on_tool_done(self, done: ToolDone) -> None:
        """A tool call's entry, said after its notice of waiting for the user (both come
        through this inbox, in the order the turn's worker posted them)."""
        self._emit(done.event)

    def _waiter(self, turn: _Turn, registry: ToolRegistry, tool: str) -> WaitNotice:
        """What a tool of `turn` calls when it starts waiting for the user (worker thread)."""
        server = getattr(registry.find(tool), "server", "")

        def waiting(text: str) -> None:
            self._inbox.put(ToolWait(turn.turn_id, tool, server, text))

        return waiting

    def _on_result(self, result: TurnAnswer | TurnError) -> None:
        # Replay: an answer due at a later frame is handled at the barrier before it.
        if not self.answer_clock.defer(result):
            self._settle(result)

    def _settle(self, result: TurnAnswer | TurnError) -> None:
        try:
            if isinstance(result, TurnAnswer):
                self._on_answer(result)
            else:
                self._on_error(result)
        finally:  # replay: the clock goes on only once the span is queued (or is not)
            self._release(result.turn_id)

    # ---- the events a `Received` carries, one handler each ------------------------------

    def _on_word(self, word: AsrWord, _at: float) -> None:
        self._tracker.on_word(word)

    def _on_text(self, piece: TextPiece, _at: float) -> None:
        self._log.add_assistant_piece(piece.text, piece.frame_index)

    def _on_span_late(self, late: SpanLate, _at: float) -> None:
        if self._retrieval is not None and self._retrieval.span_id == late.span_id:
            self._retrieval = None

    def _on_span_injected(self, injected: SpanInjected, _at: float) -> None:
        turn = self._awaiting.get(injected.span_id)
        if turn is not None:
            turn.injected = injected.monotonic_s
        if self._retrieval is not None and self._retrieval.span_id == injected.span_id:
            self._retrieval = None

    def _on_first_audio(self, heard: FirstAudioAfterSpan, _at: float) -> None:
        """The user hears the answer from this frame on: the turn's latency is complete."""
        turn = self._awaiting.pop(heard.span_id, None)
        if turn is not None:
            self._emit(TurnLatency(turn.turn_id, *self._stages(turn, heard.monotonic_s)))

    def _on_partial(self, partial: AsrPartial, _at: float) -> None:
        self._tracker.on_partial(partial)
        if self.model_triggered or not user_spoke(partial):
            return
        current = self._current
        if current is not None and current.utterance_start_s is not None and (
                current.utterance_start_s < partial.start_s
                and len(normalize(partial.text).split()) >= self.options.min_words_to_cancel):
            # A new utterance makes the old turn stale; a short backchannel ("mm") does not.
            self._cancel("the user spoke again")
            current = None
        if (self.options.mid_turn and current is None and is_clear_question(partial.text)):
            self._start_turn(partial.text, partial.start_s, "mid_turn", end_of_speech=None)

    def _on_final(self, final: AsrFinal, received: float) -> None:
        self._tracker.on_final(final)
        if self.model_triggered:
            self._on_final_for_retrieval(final)
            return
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
        self._release(self._current.turn_id)
        self._emit(TurnCancelled(self._current.turn_id, reason))
        self._current = None

    def _cancel_pending(self, reason: str) -> None:
        """The user's cancel: the answer being worked on and a pending <ret>'s request."""
        cancelled = self._current is not None
        self._cancel(reason)
        pending = self._retrieval
        if pending is not None and pending.turn is not None and pending.span_id is None:
            pending.turn.cancel.set()
            self._release(pending.turn.turn_id)
            self._emit(TurnCancelled(pending.turn.turn_id, reason))
            self._retrieval = None
            cancelled = True
        if cancelled:
            self._emit(LlmStatus("idle", f"{self.backend.name}: request cancelled"))

    def _start_turn(self, question: str, utterance_start_s: float | None, trigger: str,
                    end_of_speech: float | None) -> None:
        self._cancel("a newer question arrived")
        turn = _Turn(next(self._ids), question, utterance_start_s,
                     end_of_speech=end_of_speech, detected=self._clock(),
                     backend=self.backend, tools=self.tools)
        self._current = turn
        self._emit(TurnStarted(turn.turn_id, question, trigger))
        self._emit(LlmStatus("thinking", f"asking {self.backend.name}"))
        messages = self._log.messages(self.options.context_chars)
        if not messages or messages[-1].role != "user" or messages[-1].content != question:
            messages.append(ChatMessage("user", question))
        self._hold(turn)
        worker = threading.Thread(target=self._work, args=(turn, messages),
                                  name=f"llm-turn-{turn.turn_id}", daemon=True)
        self._workers = [w for w in self._workers if w.is_alive()] + [worker]
        worker.start()

    # ---- model-triggered retrieval (the checkpoint's <ret>) -----------------------------

    def _on_engine_ready(self, ready: EngineReady, _at: float) -> None:
        """The span budget the engine measured on this device: answers are asked for, and
        cut to, that length from the next turn on."""
        self._learn_span_budget(ready.span_tokens)

    def _learn_span_budget(self, tokens: int) -> None:
        if tokens > 0:
            self._span_tokens = tokens
            self._max_span_chars = min(self.options.max_span_chars, span_chars(tokens))

    def _on_ret(self, ret: RetToken, _at: float) -> None:
        policy = self._ret_policy
        if policy is None:
            return
        if self._retrieval is not None:
            self._emit(RetrievalIgnored(ret.frame_index, "a retrieval is already pending"))
            return
        pending = _PendingRetrieval(ret.frame_index)
        self._retrieval = pending
        # The frame's audio ends (frame + 1) * 80 ms into the conversation.
        plan = self._tracker.plan((ret.frame_index + 1) * FRAME_S, policy)
        if plan.question is None:
            pending.wait_until_frame = ret.frame_index + frames_of(policy.wait_final_s)
            return
        self._ask_retrieval(plan.plan, plan.question)

    def _on_final_for_retrieval(self, final: AsrFinal) -> None:
        self._log.add_user(final.text)
        pending = self._retrieval
        if pending is not None and pending.wait_until_frame is not None and final.text.strip():
            pending.wait_until_frame = None
            self._ask_retrieval("wait", final.text)

    def _settle_waiting(self) -> None:
        """Plan "wait" timed out: the words of the recent window are the question."""
        pending, policy = self._retrieval, self._ret_policy
        if pending is None or policy is None or pending.wait_until_frame is None:
            return
        if self._frame >= pending.wait_until_frame:
            pending.wait_until_frame = None
            question = self._tracker.window((pending.ret_frame + 1) * FRAME_S, policy.window_s)
            self._ask_retrieval("wait", question)

    def _ask_retrieval(self, plan: str, question: str) -> None:
        pending, policy = self._retrieval, self._ret_policy
        assert pending is not None and policy is not None
        question = normalise_question(question, policy)
        turn = _Turn(next(self._ids), question, None, detected=self._clock(),
                     ret_frame=pending.ret_frame, backend=self.backend, tools=self.tools)
        waited_ms = round(max(0, self._frame - pending.ret_frame) * FRAME_S * 1000.0, 3)
        self._emit(RetrievalQuestion(turn.turn_id, pending.ret_frame, question, plan,
                                     waited_ms))
        if not question:
            self._emit(NoSpan(turn.turn_id, pending.ret_frame, "", "nothing was heard"))
            self._retrieval = None
            return
        pending.turn = turn
        self._emit(TurnStarted(turn.turn_id, question, "ret"))
        self._emit(LlmStatus("thinking", f"asking {self.backend.name}"))
        self._hold(turn)
        # What the model said, read here: the log is the control thread's alone.
        said = self._assistant_said()
        worker = threading.Thread(target=self._work_retrieval, args=(turn, said),
                                  name=f"llm-retrieval-{turn.turn_id}", daemon=True)
        self._workers = [w for w in self._workers if w.is_alive()] + [worker]
        worker.start()

    def _on_retrieval_answer(self, answer: TurnAnswer) -> None:
        pending, policy = self._retrieval, self._ret_policy
        assert pending is not None and pending.turn is not None and policy is not None
        turn = pending.turn
        turn.first_token, turn.span_ready = answer.first_token, answer.posted_at
        self._emit(LlmStatus("idle", f"{self.backend.name} answered"))
        if not answer.text:
            reason = ("the LLM found no information" if answer.no_information
                      else "the tool gave nothing to read")
            self._emit(NoSpan(turn.turn_id, pending.ret_frame, turn.question, reason))
            self._retrieval = None
            return
        # The voice was told to wait for the user: the answer counts whenever it comes.
        deadline = None if turn.waited_for_user else \
            pending.ret_frame + frames_of(policy.deadline_s)
        source = "+".join(("llm",) + answer.tools)
        # Replay: the answer is in time if the frame it would have reached in real time is.
        now = self._frame if answer.arrival_frame is None else answer.arrival_frame
        if deadline is not None and now > deadline:
            seconds = round((now - pending.ret_frame) * FRAME_S, 3)
            self._emit(RetrievalLate(turn.turn_id, pending.ret_frame, turn.question, seconds,
                                     source, answer.text))
            self._retrieval = None
            return
        span_id = self._inject(turn, answer, source, at_frame=answer.arrival_frame or 0,
                               origin_frame=pending.ret_frame, deadline_frame=deadline)
        if span_id is None:
            self._retrieval = None
            return
        pending.span_id = span_id

    def _inject(self, turn: _Turn, answer: TurnAnswer, source: str,
                **where: int | None) -> int | None:
        """Queue the answer's span, and say so at once (SpanQueued); an engine that refuses
        it outright (the conversation is ending) gets AnswerNotInjected: either way the
        answer is shown."""
        try:
            span_id = self.sink.inject(answer.text, source, **where)  # type: ignore[arg-type]
        except RuntimeError as exc:
            self._emit(AnswerNotInjected(turn.turn_id, answer.text, source, str(exc),
                                         answer.cuts))
            return None
        turn.span_id = span_id
        self._awaiting[span_id] = turn
        self._emit(SpanQueued(turn.turn_id, span_id, answer.text, source, answer.cuts))
        return span_id

    def _assistant_said(self) -> str:
        return " ".join(m.content for m in self._log.messages(2000) if m.role == "assistant")

    def _work_retrieval(self, turn: _Turn, assistant_said: str) -> None:
        first_token: list[float] = []

        def on_delta(_fragment: str) -> None:
            if not first_token:
                first_token.append(self._clock())

        def on_tool(name: str, arguments: dict[str, Any], outcome: ToolResult) -> None:
            self._inbox.put(ToolDone(_tool_called(turn.turn_id, name, arguments, outcome)))

        backend, registry = self._asked_with(turn)
        try:
            answer = retrieve(backend, registry, turn.question, assistant_said,
                              self.options.profile, self._max_span_chars, turn.cancel,
                              on_delta, on_tool, budget=budget_instruction(self._span_tokens),
                              on_wait=lambda name: self._waiter(turn, registry, name))
        except LLMError as exc:
            self._post(TurnError(turn.turn_id, exc))
            return
        except Exception as exc:  # a backend bug becomes a failed turn, not a dead thread
            log.exception("retrieval failed")
            self._post(TurnError(turn.turn_id,
                                  LLMError("malformed", f"{backend.name} failed: {exc}")))
            return
        tools = (answer.tool,) if answer.tool and answer.text else ()
        self._post(TurnAnswer(turn.turn_id, answer.text, tools,
                               first_token[0] if first_token else None, answer.no_information,
                               cuts=answer.cuts, declared_s=answer.declared_s))

    def _retrieval_turn(self, turn_id: int) -> bool:
        pending = self._retrieval
        return bool(pending and pending.turn and pending.turn.turn_id == turn_id)

    # ---- answers ---------------------------------------------------------------------

    def _on_answer(self, answer: TurnAnswer) -> None:
        if self._retrieval_turn(answer.turn_id):
            self._on_retrieval_answer(answer)
            return
        turn = self._current
        if turn is None or turn.turn_id != answer.turn_id:
            return  # stale: cancelled while the LLM was still working
        self._current = None
        turn.first_token = answer.first_token
        turn.span_ready = answer.posted_at
        self._emit(LlmStatus("idle", f"{self.backend.name} answered"))
        if not answer.text:
            self._emit(TurnLatency(turn.turn_id, *self._stages(turn)))
            return
        source = "+".join(("llm",) + answer.tools)
        if answer.arrival_frame is None:
            self._inject(turn, answer, source)
        else:  # replay: not before the frame it would have reached in real time
            self._inject(turn, answer, source, at_frame=answer.arrival_frame)

    def _on_error(self, error: TurnError) -> None:
        if self._retrieval_turn(error.turn_id):
            self._retrieval = None
            if error.error.kind != "cancelled":
                self._emit(TurnFailed(error.turn_id, error.error.kind, str(error.error)))
                self._emit(LlmStatus("error", str(error.error)))
            return
        turn = self._current
        if turn is None or turn.turn_id != error.turn_id:
            return
        self._current = None
        if error.error.kind == "cancelled":
            return
        self._emit(TurnFailed(turn.turn_id, error.error.kind, str(error.error)))
        self._emit(LlmStatus("error", str(error.error)))

    @staticmethod
    def _ms(a: float | None, b: float | None) -> float | None:
        return None if a is None or b is None else round((b - a) * 1000.0, 3)

    def _stages(self, turn: _Turn, first_audio: float | None = None
                ) -> tuple[float | None, ...]:
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

    def _asked_with(self, turn: _Turn) -> tuple[LLMBackend, ToolRegistry]:
        backend = turn.backend if turn.backend is not None else self.backend
        return backend, turn.tools if turn.tools is not None else self.tools

    def _post(self, result: TurnAnswer | TurnError) -> None:
        """A request's outcome to the control thread. Replay: first the clock is frozen
        where the answer lands (replay_clock.py): the feeder feeds up to the frame before,
        and the control thread injects at that frame."""
        declared = result.declared_s if isinstance(result, TurnAnswer) else None
        arrival = self.answer_clock.answered(result.turn_id, declared)
        if arrival is not None:  # replay: it lands at that frame (live: as it comes)
            result = replace(result, arrival_frame=arrival)
        self._inbox.put(replace(result, posted_at=self._clock()))

    def _work(self, turn: _Turn, history: list[ChatMessage]) -> None:
        try:
            answer = self._tool_loop(turn, history)
        except LLMError as exc:
            self._post(TurnError(turn.turn_id, exc))
            return
        except Exception as exc:  # a backend bug becomes a failed turn, not a dead thread
            log.exception("LLM turn failed")
            error = LLMError("malformed", f"{self._asked_with(turn)[0].name} failed: {exc}")
            self._post(TurnError(turn.turn_id, error))
            return
        self._post(answer)

    def _tool_loop(self, turn: _Turn, history: list[ChatMessage]) -> TurnAnswer:
        backend, tools = self._asked_with(turn)
        budget = budget_instruction(self._span_tokens)
        system = f"{self.options.system_prompt} {budget}" if budget else self.options.system_prompt
        messages = [ChatMessage("system", system), *history]
        first_token: list[float] = []
        used: list[str] = []
        declared = _DeclaredTime()

        def on_delta(_fragment: str) -> None:
            if not first_token:
                first_token.append(self._clock())

        specs = tools.specs()
        for round_index in range(self.options.max_tool_rounds + 1):
            if turn.cancel.is_set():
                raise LLMError("cancelled", "cancelled")
            started = self._clock()
            allow_tools = specs if round_index < self.options.max_tool_rounds else []
            result = backend.chat(messages, allow_tools, on_delta, turn.cancel)
            declared.add(result.declared_s)
            if not first_token and result.first_token_s is not None:
                first_token.append(started + result.first_token_s)
            if not result.tool_calls or not allow_tools:
                text, cuts = speakable_span_cut(result.content, self._max_span_chars)
                if text:
                    return TurnAnswer(turn.turn_id, text, tuple(dict.fromkeys(used)),
                                       first_token[0] if first_token else None, cuts=cuts,
                                       declared_s=declared.seconds)
                # Nothing to say is a failed turn the user sees, never a silent one: the
                # last round (tools withheld) still asking for tools, or an empty answer.
                if result.tool_calls or round_index == self.options.max_tool_rounds:
                    break
                raise LLMError("malformed", f"{backend.name} answered with nothing to say")
            messages.append(ChatMessage("assistant", result.content,
                                        tool_calls=result.tool_calls))
            for call in result.tool_calls[: self.options.max_calls_per_round]:
                outcome = tools.call(call.name, call.arguments, turn.cancel,
                                     on_wait=self._waiter(turn, tools, call.name))
                declared.add_tool(outcome)
                self._inbox.put(ToolDone(_tool_called(turn.turn_id, call.name,
                                                      dict(call.arguments), outcome)))
                if outcome.ok:
                    used.append(call.name)
                content = outcome.content if outcome.ok else f"error: {outcome.error}"
                messages.append(ChatMessage("tool", content, tool_name=call.name))
        raise LLMError("malformed", f"{backend.name} kept calling tools after "
                                    f"{self.options.max_tool_rounds} rounds and gave no answer")


class _DeclaredTime:
    """A turn's latency as its LLM's server scripted it (the stand-in's declared delays),
    plus its tools' own time (as their servers scripted it, where they say: our FDB v3 mock
    APIs); None once one round's server declared nothing (a real LLM: the replay measures
    the turn instead)."""

    def __init__(self) -> None:
        self.seconds: float | None = 0.0

    def add(self, declared_s: float | None) -> None:
        self.seconds = None if declared_s is None or self.seconds is None \
            else self.seconds + declared_s

    def add_tool(self, outcome: ToolResult) -> None:
        if self.seconds is not None:  # a tool's own time: scripted where its server says
            self.seconds += outcome.replayed_s


def _tool_called(turn_id: int, name: str, arguments: dict[str, Any],
                 outcome: ToolResult) -> ToolCalled:
    return ToolCalled(turn_id, name, arguments, outcome.ok, outcome.error, outcome.source,
                      len(outcome.content), outcome.truncated, outcome.cuts, outcome.server,
                      outcome.server_tool, outcome.content, outcome.elapsed_ms)
