"""Is the configured LLM there? Asked once when a conversation starts (and when its LLM
changes), so the status bar says "unreachable" and why before the first question instead
of a hopeful "idle".

The probe is the backend's own `health()` (Ollama: is the server up, is the model pulled),
on a thread of its own with a deadline: a server that accepts the connection and never
answers is "unreachable" after `PROBE_TIMEOUT_S`, whatever the backend's own timeout is.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from app.llm.backend import BackendHealth, LLMBackend

log = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class LlmProbed:
    """What the probe found: the status bar's LLM state and its reason."""

    backend: LLMBackend  # the backend asked (the answer is stale once it was replaced)
    state: str  # "idle" (it answered), "unreachable", "model missing"
    message: str


def _judged(backend: LLMBackend, health: BackendHealth | None, host: str,
            timeout_s: float) -> LlmProbed:
    if health is None:
        return LlmProbed(backend, "unreachable",
                         f"{backend.name} at {host}: no answer within {timeout_s:g} s")
    if health.ok:
        return LlmProbed(backend, "idle", health.message)
    # It answered with its list of models, but the chosen one is not among them.
    state = "model missing" if health.models else "unreachable"
    return LlmProbed(backend, state, health.message)


def unavailable_notice(probed: LlmProbed) -> str:
    """The transcript's words for an LLM that cannot answer: the reason, once, and what to do
    about that reason (a model that is not installed is no address problem)."""
    reason = probed.message.strip().rstrip(".").strip()
    if probed.state == "model missing":
        advice = ("install it as said, or choose a model the server has in Settings → "
                  "Assistant (LLM) (Test connection lists them)")
    else:
        advice = ("check that the LLM server is running (Help → Get an LLM says how to get "
                  "one) and its address in Settings → Assistant (LLM)")
    return (f"The assistant (LLM) is not available: {reason}. The speech model talks on "
            f"meanwhile; {advice}.")


def probe_in_background(backend: LLMBackend, host: str, report: Callable[[LlmProbed], None],
                        timeout_s: float = PROBE_TIMEOUT_S) -> None:
    """Ask `backend.health()` off the caller's thread; `report` gets the verdict (on the
    probe's thread) within about `timeout_s`."""
    answer: list[BackendHealth] = []

    def ask() -> None:
        try:
            answer.append(backend.health())
        except Exception as exc:  # a probe never fails the conversation
            log.info("the LLM probe failed: %s", exc, exc_info=True)
            answer.append(BackendHealth(False, f"{backend.name} at {host}: {exc}"))

    def watch() -> None:
        asker = threading.Thread(target=ask, name="llm-probe-ask", daemon=True)
        asker.start()
        asker.join(timeout_s)
        result = _judged(backend, answer[0] if answer else None, host, timeout_s)
        close = getattr(backend, "close", None)  # the probe's own backend: its HTTP pool,
        if callable(close):                      # and a request that hangs, end here
            with contextlib.suppress(Exception):
                close()
        log.info("LLM at %s: %s (%s)", host, result.state, result.message)
        report(result)

    threading.Thread(target=watch, name="llm-probe", daemon=True).start()
