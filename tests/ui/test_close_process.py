"""Closing the real app with an LLM request pending: the window goes at once, the request is
abandoned (the stand-in sees its connection closed) and the process exits within 2 s.

The app runs in a child process (tests/ui/close_driver.py drives `run_app`), offscreen, on
the tiny model, with no audio device at all (PulseAudio pointed at nothing: the conversation
runs in its no-device mode), against the stand-in Ollama, which hangs on the question."""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

from app.llm.ollama_standin import OllamaStandIn, ScriptedReply
from app.settings.schema import AppSettings, LlmSettings, SpeechModelSettings
from app.settings.store import SettingsStore
from tests.waiting import wait_until

REPO_ROOT = Path(__file__).resolve().parents[2]
DRIVER = Path(__file__).with_name("close_driver.py")


def _lines(stream, into: queue.Queue) -> None:
    for line in stream:
        into.put(line.rstrip("\n"))


def _expect(lines: queue.Queue, prefix: str, timeout: float, seen: list[str]) -> str:
    deadline = time.monotonic() + timeout
    while True:
        try:
            line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            raise AssertionError(f"no {prefix!r} from the app; it said {seen}") from None
        seen.append(line)
        if line.startswith(prefix):
            return line
        assert not line.startswith("failed"), seen


def test_closing_with_a_pending_llm_request_exits_within_two_seconds(tiny_folder, data_dir,
                                                                     tmp_path):
    hang = ScriptedReply(content="too late", first_token_delay_s=60.0)
    with OllamaStandIn(script=[hang]) as standin:
        config = tmp_path / "config"
        SettingsStore(config / "settings.json").save(AppSettings(
            speech=SpeechModelSettings(model_id="tiny", device="cpu"),
            llm=LlmSettings(backend="ollama", host=standin.url, model="standin:latest",
                            tools_enabled=False, stt_model="none")))
        env = {**os.environ, "QT_QPA_PLATFORM": "offscreen",
               "CONTEXTSPAN_CONFIG_DIR": str(config), "CONTEXTSPAN_DATA_DIR": str(data_dir),
               "PULSE_SERVER": "unix:/nonexistent"}  # no sound server: no audio device at all
        app = subprocess.Popen([sys.executable, str(DRIVER)], cwd=REPO_ROOT, env=env,
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=_lines, args=(app.stdout, lines), daemon=True).start()
        errors: list[str] = []
        threading.Thread(target=lambda: errors.extend(app.stderr), daemon=True).start()
        seen: list[str] = []
        try:
            state = _expect(lines, "state", 180.0, seen)
            _expect(lines, "asked", 10.0, seen)
            wait_until(lambda: standin.requests, 30.0,
                       message="the question never reached the LLM")
            assert app.stdin is not None
            app.stdin.write("close\n")
            app.stdin.flush()
            closing = float(_expect(lines, "closing", 10.0, seen).split()[1])
            close_returned = float(_expect(lines, "close-returned", 5.0, seen).split()[1])
            app.wait(timeout=30.0)
            exited = time.monotonic()
        finally:
            if app.poll() is None:
                app.kill()
                app.wait(10.0)
        wait_until(lambda: standin.hangups, 5.0,
                   message=lambda: "the stand-in never saw the request abandoned; the app "
                                   f"exited {app.returncode}: {''.join(errors)}")
    exit_s = exited - closing  # both CLOCK_MONOTONIC: comparable across processes
    abandoned_s = standin.hangups[0] - closing if standin.hangups else None
    print(f"\nclose() returned in {close_returned * 1000:.0f} ms; the process exited "
          f"{exit_s * 1000:.0f} ms after the close; the stand-in saw the request abandoned "
          f"{abandoned_s * 1000:.0f} ms after it" if abandoned_s is not None else "")
    assert state == "state paused"  # no microphone and no speaker: text-only, not an error
    assert app.returncode == 0, "".join(errors)
    assert abandoned_s is not None and abandoned_s < 2.0
    assert close_returned < 1.0  # the window does not wait for the conversation
    assert exit_s < 3.0  # the app ends itself by 2 s; a margin for a loaded machine
    assert "Traceback" not in "".join(errors), "".join(errors)
